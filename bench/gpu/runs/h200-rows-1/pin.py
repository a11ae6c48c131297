# pin.py SRC DST MCPU [K=V ...]: SRC with the default schedules rocmc writes for MCPU (and tune values) pasted in.
import re, subprocess, sys
src, dst, mcpu, *tune = sys.argv[1:]
cmd = ["/work/main/target/debug/rocmc", "build", "--mcpu", mcpu, "--emit", "schedule", src, "-o", "-"]
cmd += ["--tune", ",".join(tune)] if tune else []
out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
scheds = {}
for m in re.finditer(r"# stage `(\w+)`.*?\n(?:#.*\n)*(schedule = \[\n(?:  .*\n)*\])", out):
    scheds[m.group(1)] = m.group(2)
text = open(src).read()
lines = text.split("\n"); res = []
for l in lines:
    res.append(l)
    m = re.match(r'compute = "(\w+)\[', l)
    if m and m.group(1) in scheds:
        res.append(scheds[m.group(1)])
open(dst, "w").write(f"# {src} with rocmc's default for {mcpu} {' '.join(tune)} pinned\n" + "\n".join(res))
print(dst, sorted(scheds))
