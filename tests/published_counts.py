"""torchvision's published parameter counts (its weights metadata "num_params") of the image
models the PyTorch and MXNet runners share. googlenet is published without its auxiliary
heads, as both runners build it; inception3 is published with its auxiliary head, which
both runners leave out (the tests subtract it)."""

TORCHVISION_PUBLISHED = {
    "alexnet_owt": 61_100_840,
    "googlenet": 6_624_904,
    "inception3": 27_161_264,
    "vgg11": 132_863_336,
    "vgg13": 133_047_848,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
}
