"""The stress ledger for shard moves (issue 22): two proxies under keyed load while
Citus moves shards, in a loop of single-shard moves by logical replication, then
add-worker -> rebalance -> drain -> remove-worker cycles. Every key is then retried on
either proxy, and the ledger must read zero: none executed twice, none lost, none stuck
in flight.

The test cluster runs at synchronous_commit=off (scripts/citus.sh) on purpose: that is
the setting under which a claim committed just before a move's final catch-up was lost
(docs/SCALING.md, "Shard moves"), and the proxy must be safe whatever the server's
default is.

Bounded: IDEMPROXY_CITUS_MOVES single-shard moves (default 16) and
IDEMPROXY_CITUS_CYCLES cycles (default 2), and IDEMPROXY_CITUS_BUDGET seconds at most
(default 200) for the moving part; scripts/citus-soak.sh runs a longer one. Runs in
scripts/test.sh's Citus stage (IDEMPROXY_TEST_CITUS=1); skipped elsewhere."""
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import ROOT, Load, problem, settle

CITUS_SH = os.path.join(ROOT, "scripts", "citus.sh")


def citus(*args):
    return subprocess.run(["bash", CITUS_SH, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def placements(pg):
    """(shardid, port) of every placement of idempotency_records."""
    rows = pg.sql("SELECT shardid, nodeport FROM citus_shards"
                  " WHERE table_name = 'idempotency_records'::regclass ORDER BY shardid")
    return [tuple(int(v) for v in line.split("|")) for line in rows.splitlines() if line]


def workers(pg):
    rows = pg.sql("SELECT nodeport FROM pg_dist_node WHERE noderole = 'primary'"
                  " AND groupid <> 0 AND isactive ORDER BY nodeport")
    return [int(p) for p in rows.splitlines() if p]


def move_one(pg, n):
    """Moves the n-th shard (round robin) to the worker that holds the fewest."""
    shards = placements(pg)
    ports = workers(pg)
    shard, source = shards[n % len(shards)]
    counts = {p: sum(1 for _, q in shards if q == p) for p in ports}
    target = min((p for p in ports if p != source), key=lambda p: counts[p])
    pg.sql("SELECT citus_move_shard_placement(%d, '127.0.0.1', %d, '127.0.0.1', %d,"
           " shard_transfer_mode := 'force_logical')" % (shard, source, target))


def test_shard_moves_and_rebalance_cycles_under_load_lose_nothing(make_proxy, upstream, pg, key,
                                                                  ledger):
    if not pg.citus:
        pytest.skip("needs the Citus cluster (IDEMPROXY_TEST_CITUS=1)")
    moves_wanted = int(os.environ.get("IDEMPROXY_CITUS_MOVES", "16"))
    cycles_wanted = int(os.environ.get("IDEMPROXY_CITUS_CYCLES", "2"))
    budget = float(os.environ.get("IDEMPROXY_CITUS_BUDGET", "200"))
    cluster = os.path.dirname(pg.dir)
    proxies = [make_proxy(), make_proxy()]
    path = "/v1/orders?delay_ms=5"
    loads = [Load(p, "%s-%d" % (key, i), path, clients=3) for i, p in enumerate(proxies)]
    started = time.time()
    moves = cycles = 0
    try:
        time.sleep(0.5)
        while moves < moves_wanted and time.time() - started < budget:
            move_one(pg, moves)
            moves += 1
        while cycles < cycles_wanted and time.time() - started < budget:
            port = int(citus("add-worker", cluster))
            before = sum(1 for _, p in placements(pg) if p == port)
            pg.sql("SELECT citus_rebalance_start(shard_transfer_mode := 'force_logical')")
            # Bounded: a move that fails is retried by the background job for ever.
            pg.sql("SET statement_timeout = '120s'; SELECT citus_rebalance_wait()")
            onto = sum(1 for _, p in placements(pg) if p == port) - before
            citus("remove-worker", cluster, str(port))  # citus_drain_node, then remove
            assert port not in workers(pg)
            # No cleanup record may outlive its node: later moves of its shards would
            # fail for ever.
            assert pg.sql("SELECT count(*) FROM pg_dist_cleanup WHERE node_group_id"
                          " NOT IN (SELECT groupid FROM pg_dist_node)") == "0"
            assert onto > 0, "the rebalance moved nothing onto the new worker"
            moves += 2 * onto
            cycles += 1
        time.sleep(0.5)
    finally:
        delivered = {}
        for load in loads:
            delivered.update(load.stop())
    took = time.time() - started
    print("shard moves: %d (%d rebalance cycles) in %.0f s, %d keys under load"
          % (moves, cycles, took, len(delivered)))
    assert moves >= moves_wanted and cycles >= cycles_wanted, \
        "the budget of %.0f s ran out after %d moves and %d cycles" % (budget, moves, cycles)
    answered = [k for k, r in delivered.items() if r is not None]
    assert len(answered) > 100
    keys = sorted(delivered)
    with ThreadPoolExecutor(max_workers=8) as pool:  # a retry on either instance
        finals = list(pool.map(lambda i: settle(proxies[i % 2], keys[i], path), range(len(keys))))
    stuck = [k for k, final in zip(keys, finals)
             if final.status == 409 and problem(final)["type"].endswith("/request-in-flight")]
    lost = []
    for k, final in zip(keys, finals):
        first = delivered[k]
        _, problems = ledger.check(upstream, k, [first], final)
        if first is not None and first.status == 201 and \
                final.header("Idempotent-Replayed") != "true":
            lost.append(k)
    executed_twice = [k for k in keys if upstream.executions.count(key=k) > 1]
    print("ledger: %d keys; executed twice %d, lost %d, stuck in flight %d"
          % (len(keys), len(executed_twice), len(lost), len(stuck)))
    assert (executed_twice, lost, stuck) == ([], [], [])
