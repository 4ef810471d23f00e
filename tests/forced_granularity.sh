#!/bin/sh
# forced_granularity.sh -- the commit and pipeline tests on mappings that libpmem2
# treats as cache-line and byte granular (PMEM2_FORCE_GRANULARITY), so the
# CLWB / non-temporal + fence paths of real PM run here too, on tmpfs files.
B=${BUILD:-build}
echo "1..4"
n=0
for g in CACHE_LINE BYTE; do
	for t in store_commit pipeline; do
		n=$((n + 1))
		if out=$(PMEM2_FORCE_GRANULARITY=$g "$B/tests/$t" 2>&1) && ! echo "$out" | grep -q "^not ok"; then
			echo "ok $n - $t with PMEM2_FORCE_GRANULARITY=$g"
		else
			echo "not ok $n - $t with PMEM2_FORCE_GRANULARITY=$g"
			echo "$out" | grep -v "^ok" | sed 's/^/# /'
		fi
	done
done
