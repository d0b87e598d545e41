# The Llama decode of ../shared/fixtures/llama-decode as a step loop (issue 36's GPU check): a
# LlamaForCausalLM from its config with random weights (hidden 2048, intermediate 5632, 16
# layers, 32 heads, 4 KV heads, bf16, nothing downloaded), SDPA attention, batch 1, a prompt of
# 16 tokens, then one token a step with its KV cache, as generation runs. Every timed token is a
# new sequence length, so where PyTorch takes cuDNN's SDPA backend each step plans anew.
# --fix (nocudnn): torch.backends.cuda.enable_cudnn_sdp(False), another backend for attention.
# --fix warm: each shape planned once before the timed steps (the same decode run once first,
# on a cache of its own), which is the replay's what-if for per-shape planning.
#   python3 llama_steps.py [STEPS] [--fix [nocudnn|warm]] [--kineto PATH]
import torch
import steploop


def main():
    ap = steploop.parser("llama_steps", 24, ["nocudnn", "warm"], warmup=2,
                         doc="a Llama decode, one token a step")
    a = ap.parse_args()
    steploop.check(a)
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.backends.cuda.enable_cudnn_sdp(a.fix != "nocudnn")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                      max_position_embeddings=4096)
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg)
    m = m.to(torch.bfloat16).eval()
    ids = torch.randint(0, 32000, (1, 16), device="cuda")
    state = {}

    def prefill():
        with torch.no_grad():
            out = m(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        state["tok"], state["past"] = out.logits[:, -1:].argmax(-1), out.past_key_values
        state["len"] = 16

    def step(k):
        with torch.no_grad():
            state["len"] += 1
            mask = torch.ones(1, state["len"], dtype=torch.long, device="cuda")
            out = m(input_ids=state["tok"], past_key_values=state["past"], attention_mask=mask,
                    use_cache=True)
            state["tok"], state["past"] = out.logits[:, -1:].argmax(-1), out.past_key_values

    if a.fix == "warm":
        prefill()
        for k in range(a.warmup + a.steps):
            step(k)
        torch.cuda.synchronize()
    prefill()
    steploop.run("llama_steps", a, step, detail=f"cudnn_sdp={a.fix != 'nocudnn'}")


if __name__ == "__main__":
    main()
