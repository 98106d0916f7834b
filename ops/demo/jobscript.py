"""The demo's batch job script: reads the GPUs Slurm gave the job, prices the placement with
its slowdown table and sleeps its duration stretched by that slowdown (``job_script``); and
the line it prints (``parse_job_output``)."""

from __future__ import annotations

from typing import Any

from attentived.topology import Topology

__all__ = [
    "job_script",
    "parse_job_output",
]


_JOB_SCRIPT = r'''#!/bin/bash
# attentived demo job (written by attentived.ops.demo). Usage:
#   job.sh BASE 'SIGNATURE=SLOWDOWN ...'
# Reads the GPUs Slurm gave this job (scontrol -d show job: node and GPU indices; else
# SLURM_JOB_NODELIST + CUDA_VISIBLE_DEVICES), prices the placement with the table the demo
# computed from the simulator's speed model, and sleeps BASE x slowdown seconds.
t0=$(date +%s.%N)
base=$1
table=${2:-}
export LC_ALL=C
@TOPOLOGY@
expand() {  # "0-2,5" -> "0 1 2 5"
    local part i out=""
    local -a parts
    IFS=, read -ra parts <<< "$1"
    for part in "${parts[@]}"; do
        if [[ $part == *-* ]]; then
            for ((i = ${part%-*}; i <= ${part#*-}; i++)); do out+="$i "; done
        elif [ -n "$part" ]; then
            out+="$part "
        fi
    done
    echo $out
}
split_of() {  # NODE IDX... -> GPUs per NVLink island, largest first ("4+2")
    local node=$1 i
    shift
    local -a isl=($(islands_of "$node")) cnt=()
    for ((i = 0; i < $(nislands_of "$node"); i++)); do cnt[i]=0; done
    for i in "$@"; do cnt[${isl[i]}]=$((cnt[${isl[i]}] + 1)); done
    printf '%s\n' "${cnt[@]}" | sort -rn | paste -sd+ -
}
alloc="" src=scontrol node=""
for w in $(scontrol -o -d show job "$SLURM_JOB_ID" 2>/dev/null); do
    case "$w" in
        Nodes=*) node=${w#Nodes=};;
        GRES=*IDX:*)
            idx=${w#*IDX:}; idx=${idx%%)*}
            for n in $(scontrol show hostnames "$node"); do alloc+="$n $(expand "$idx");"; done;;
    esac
done
if [ -z "$alloc" ]; then
    src=env
    for n in $(scontrol show hostnames "${SLURM_JOB_NODELIST:-}"); do alloc+="$n $(expand "${CUDA_VISIBLE_DEVICES:-}");"; done
fi
sws="" splits=""
IFS=';' read -ra entries <<< "$alloc"
for e in "${entries[@]}"; do
    set -- $e
    [ $# -ge 1 ] || continue
    sws+="$(switch_of "$1")"$'\n'
    splits+="$(split_of "$@")"$'\n'
done
sig="$(printf '%s' "$sws" | sort -u | grep -c .):$(printf '%s' "$splits" | sort | paste -sd, -)"
slow=1 known=0
for kv in $table; do
    if [ "${kv%=*}" = "$sig" ]; then slow=${kv##*=}; known=1; fi
done
[ -n "$table" ] || known=1
rest=$(awk -v b="$base" -v s="$slow" -v t0="$t0" -v now="$(date +%s.%N)" \
    'BEGIN { r = b * s - (now - t0); if (r < 0) r = 0; printf "%.3f", r }')
echo "demo-job job=${SLURM_JOB_ID} sig=$sig slowdown=$slow known=$known base=$base sleep=$rest source=$src alloc=${alloc// /:}"
sleep "$rest"
echo "demo-job done"
'''


def job_script(topo: Topology) -> str:
    """The demo's batch script with ``topo``'s node -> leaf switch and GPU -> island maps."""
    sw, isl, nisl = [], [], []
    for ni, node in enumerate(topo.nodes):
        where = {g: k for k, group in enumerate(node.islands) for g in group}
        sw.append(f'        {node.name}) echo {topo.switch_names[int(topo.node_switch[ni])]};;')
        isl.append(f'        {node.name}) echo "{" ".join(str(where[g]) for g in range(node.num_gpus))}";;')
        nisl.append(f'        {node.name}) echo {len(node.islands)};;')
    fn = []
    for name, cases in (("switch_of", sw), ("islands_of", isl), ("nislands_of", nisl)):
        fn.append(f'{name}() {{\n    case "$1" in\n' + "\n".join(cases) + '\n        *) echo "?";;\n    esac\n}')
    return _JOB_SCRIPT.replace("@TOPOLOGY@", "\n".join(fn))


def parse_job_output(text: str) -> dict[str, Any]:
    """The ``demo-job`` line a job printed: its signature, slowdown, source and allocation."""
    for line in text.splitlines():
        if line.startswith("demo-job job="):
            out: dict[str, Any] = {}
            for word in line.split()[1:]:
                k, _, v = word.partition("=")
                out[k] = v
            out["slowdown"] = float(out.get("slowdown", "nan"))
            out["known"] = out.get("known") == "1"
            out["done"] = "demo-job done" in text
            return out
    return {}
