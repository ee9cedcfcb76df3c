"""Language-model inference cells (cell kind ``llm_inference``): ``python -m dlbench.llm``.

A cell runs a batch of ``prompt_length``-token prompts through a decoder-only model of the
registry (dlbench.models.llm) into a static KV cache sized for the prompt and its output
(the prefill: its time is the time to first token, TTFT), then generates the other
``output_length`` - 1 tokens one at a time, greedily (each step's time is an inter-token
latency, ITL; a generation's mean step time is its time per output token, TPOT). On a GPU every timed step ends synchronised. See dlbench.llm.runner.
"""
