"""A small Caffe ``Datum`` writer independent of dlbench's: protobuf wire format by hand
(tag = field number << 3 | wire type), so tests can check our reader and our message class
against bytes that our writer did not produce."""


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def wire_datum(*, label: int, channels: int = 0, height: int = 0, width: int = 0,
               data: bytes, encoded: bool = False) -> bytes:
    """caffe.Datum: channels=1, height=2, width=3, data=4 (bytes), label=5, encoded=7."""
    out = b""
    for number, value in ((1, channels), (2, height), (3, width)):
        if value:
            out += bytes([number << 3]) + varint(value)
    out += bytes([4 << 3 | 2]) + varint(len(data)) + data
    out += bytes([5 << 3]) + varint(label)
    if encoded:
        out += bytes([7 << 3]) + varint(1)
    return out
