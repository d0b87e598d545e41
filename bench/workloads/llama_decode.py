# A Llama-style decode loop at batch 1: a LlamaForCausalLM built from its config (8 layers,
# hidden 1024, grouped-query attention, bf16, random weights, nothing downloaded), SDPA
# attention, one token at a time with its KV cache, as generation runs. `--no-cudnn-sdp` turns
# PyTorch's cuDNN SDPA backend off (the diagnosis should have said to).
import sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM
args = [a for a in sys.argv[1:] if not a.startswith("--")]
iters = int(args[0]) if args else 40
torch.backends.cuda.enable_cudnn_sdp("--no-cudnn-sdp" not in sys.argv)
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=4, vocab_size=32000,
                  max_position_embeddings=4096)
cfg._attn_implementation = "sdpa"
m = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
ids = torch.randint(0, 32000, (1, 32), device="cuda")

def decode_token(tok, past):
    out = m(input_ids=tok, past_key_values=past, use_cache=True)
    return out.logits[:, -1:].argmax(-1), out.past_key_values

with torch.no_grad():
    out = m(input_ids=ids, use_cache=True)  # the prompt
    tok, past = out.logits[:, -1:].argmax(-1), out.past_key_values
    for _ in range(4):
        tok, past = decode_token(tok, past)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(iters):
        tok, past = decode_token(tok, past)
    torch.cuda.synchronize(); dt = time.perf_counter() - t
print(f"WORKLOAD llama_decode iters={iters} wall_s={dt:.3f} per_iter_ms={dt/iters*1e3:.2f}")
