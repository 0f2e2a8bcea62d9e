"""The CPU features that decide how fast a CPU cell runs, read from /proc/cpuinfo, and how two machines' features
differ. A VM's model name often says only "Intel(R) Xeon(R) Processor": family, model number and stepping name the
part, the flags say what the framework can use. Pure text in, plain data out (bench/ compares what workers wrote).
"""
from __future__ import annotations

# The one list of flags recorded (names as the Linux kernel spells them in /proc/cpuinfo), and why each matters.
SPEED_FLAGS: dict[str, str] = {
    "amx_tile": "AMX tile registers: oneDNN runs bf16/int8 matmul and convolution on tiles when present "
                "(Sapphire Rapids and later); the largest bf16 step on a CPU",
    "amx_bf16": "bf16 tile multiply: with amx_tile, oneDNN's fastest bf16 path",
    "amx_int8": "int8 tile multiply: oneDNN's fastest int8 path",
    "avx512f": "AVX-512 foundation: 512-bit fp32 kernels in oneDNN and ATen (get_cpu_capability 'AVX512')",
    "avx512_bf16": "bf16 dot products in AVX-512 (Cooper Lake, Zen 4): bf16 without AMX falls back to this, and "
                   "without it to emulation through fp32 (slower than fp32)",
    "avx512_vnni": "int8 dot products in AVX-512: oneDNN's int8 path without AMX",
    "avx512_fp16": "native fp16 arithmetic (Sapphire Rapids): without it fp16 converts to fp32 and back",
    "avx_vnni": "int8 dot products on 256-bit vectors (Alder Lake and later, no AVX-512 needed)",
    "avx2": "256-bit vectors: the fp32 fallback ISA where there is no AVX-512 (get_cpu_capability 'AVX2')",
    "fma": "fused multiply-add: with avx2 the floor oneDNN's fast fp32 kernels need",
}

# /proc/cpuinfo key → field recorded (lscpu shows the same values as Vendor ID, CPU family, Model, Stepping).
_FIELDS = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping",
           "microcode": "microcode", "model name": "model_name"}
_NUMERIC = ("family", "model", "stepping")


def parse_cpuinfo(text: str) -> dict | None:
    """The first processor's identity and SPEED_FLAGS (flag → present) from /proc/cpuinfo text; None when the text
    has no processor block. `features` is None where the kernel lists no x86 `flags` line (other architectures)."""
    block: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if block:
                break  # the first processor is enough: the others of one machine are the same part
            continue
        key, sep, value = line.partition(":")
        if sep:
            block[key.strip()] = value.strip()
    if not block:
        return None
    cpu: dict = {}
    for key, name in _FIELDS.items():
        value = block.get(key)
        cpu[name] = int(value) if name in _NUMERIC and value is not None and value.isdigit() else value
    flags = block.get("flags")
    cpu["features"] = None if flags is None else {f: f in set(flags.split()) for f in SPEED_FLAGS}
    return cpu


def cpu_probe(path: str = "/proc/cpuinfo") -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return None


def signature(features: dict[str, bool] | None) -> str | None:
    """A normalised text of the checked flags, '+flag' present and '-flag' absent, sorted: equal texts mean the same
    features. Absent flags are kept so that a flag added to SPEED_FLAGS later is not read as 'lacks it'."""
    if not features:
        return None
    return " ".join(("+" if features[f] else "-") + f for f in sorted(features))


def parse_signature(text: str) -> dict[str, bool]:
    return {item[1:]: item[0] == "+" for item in text.split() if item[:1] in "+-" and len(item) > 1}


def differences(baseline: str, candidate: str) -> list[str]:
    """'baseline has X, Y, candidate lacks them' (and the reverse), over the flags checked on both sides, in
    SPEED_FLAGS order; empty when the features agree."""
    b, c = parse_signature(baseline), parse_signature(candidate)
    both = sorted(set(b) & set(c), key=lambda f: (list(SPEED_FLAGS).index(f) if f in SPEED_FLAGS else 99, f))
    out = []
    for has, lacks, flags in (("baseline", "candidate", [f for f in both if b[f] and not c[f]]),
                              ("candidate", "baseline", [f for f in both if c[f] and not b[f]])):
        if flags:
            out.append(f"{has} has {', '.join(flags)}, {lacks} lacks {'it' if len(flags) == 1 else 'them'}")
    return out


def cpu_line(cpu: dict | None) -> str | None:
    """'AMD EPYC (AuthenticAMD family 25 model 17 stepping 1, microcode 0x1000065); AMX: no, AVX-512 BF16: yes,
    AVX-512 FP16: no' — what tells two machines with the same model name apart."""
    if not cpu:
        return None
    ident = [str(cpu["vendor"])] if cpu.get("vendor") else []
    ident += [f"{name} {cpu[name]}" for name in ("family", "model", "stepping") if cpu.get(name) is not None]
    ident = " ".join(ident)
    if cpu.get("microcode"):
        ident += f", microcode {cpu['microcode']}"
    line = f"{cpu.get('model_name') or '?'}" + (f" ({ident.strip(', ')})" if ident else "")
    feats = cpu.get("features")
    if feats:
        def yn(*flags):
            return "yes" if all(feats.get(f) for f in flags) else "no"
        line += (f"; AMX: {yn('amx_tile', 'amx_bf16')}, AVX-512 BF16: {yn('avx512_bf16')}, "
                 f"AVX-512 FP16: {yn('avx512_fp16')}, AVX-512: {yn('avx512f')}")
    return line
