# shellcheck shell=bash
# tests/bench/huge.sh — sourced by the bench scripts that run dpdk-testpmd and fedgated on vdevs
# (nat_bench.sh, resolve_bench.sh): EAL memory on 2 MB hugepages where the machine gives them, as
# a deployment runs, otherwise --no-huge. With 4 KB pages every mbuf sits on a page of its own and
# each packet costs TLB misses that have nothing to do with the forwarder measured (cache hits:
# 19.7 M/s on 4 KB pages, 25.5 M/s on hugepages; testpmd 5tswap about 42 and 59 M packets/s, half
# the per-stats-block figures first reported: see testpmd_rate.sh).
#
#   bench_huge_init                 before anything else: no hugepages yet (HUGE_DIR empty)
#   bench_huge_reserve DIR MB WHO   reserves MB of 2 MB pages, mounts hugetlbfs on DIR; on failure
#                                   says so (WHO: the script's name) and stays with --no-huge
#   bench_huge_release              in the script's cleanup: unmounts, gives the pages back
#   eal_mb MBUFS DATA_ROOM [huge]   MB of -m for a pool of MBUFS mbufs, with room for the rest (huge:
#                                   as on hugepages, to size a reservation before it is made)
#   eal_mem_args MB                 the EAL's memory arguments, as separate words
# MEMORY says which, for the script's table.

bench_huge_init() {
    HUGE_DIR="" HUGE_OLD=""
    MEMORY="no hugepages (--no-huge, 4 KB pages)"
}

# With --no-huge the memory is not IOVA-contiguous, so the mempool never lets an object (mbuf header
# 128 + data room + 64 of mempool header) straddle a 4 KB page: a 2176-byte mbuf takes a whole page.
# On hugepages objects pack end to end.
eal_mb() {
    if [[ -n $HUGE_DIR || ${3:-} == huge ]]; then
        echo $((($1 * ($2 + 192) + 1048575) / 1048576 + 384))
        return
    fi
    local per_page=$((4096 / ($2 + 192)))
    ((per_page >= 1)) || per_page=1
    echo $(((($1 + per_page - 1) / per_page) * 4096 / 1048576 + 384))
}

bench_huge_reserve() {
    local dir=$1 need_mb=$2 who=$3 pages got
    pages=$(((need_mb + 63) / 2 + 32))  # 2 MB pages, with some to spare
    HUGE_OLD=$(cat /proc/sys/vm/nr_hugepages)
    mkdir -p "$dir"
    echo $((HUGE_OLD + pages)) >/proc/sys/vm/nr_hugepages 2>/dev/null || true
    got=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
    if ((got >= pages)) && mount -t hugetlbfs -o pagesize=2M nodev "$dir" 2>/dev/null; then
        HUGE_DIR=$dir
        MEMORY="hugepages: $pages x 2 MB reserved for the run (hugetlbfs)"
    else
        echo "$HUGE_OLD" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
        echo "$who: could not reserve $pages hugepages ($got free): running with --no-huge" >&2
        HUGE_OLD=""
    fi
}

bench_huge_release() {
    [[ -n $HUGE_DIR ]] || return 0
    umount "$HUGE_DIR" 2>/dev/null || true
    [[ -z $HUGE_OLD ]] || echo "$HUGE_OLD" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
    HUGE_DIR=""
}

eal_mem_args() {
    if [[ -n $HUGE_DIR ]]; then
        echo "--huge-dir $HUGE_DIR --huge-unlink -m $1"
    else
        echo "--no-huge -m $1"
    fi
}
