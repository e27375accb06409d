"""The store on a Citus cluster, with the proxies running: a worker added and the
shards rebalanced onto it under keyed load (docs/SCALING.md). Runs in scripts/test.sh's
Citus stage (IDEMPROXY_TEST_CITUS=1, the coordinator's DSN); skipped elsewhere."""
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import ROOT, Load, settle


def shards_on(pg, port):
    return int(pg.sql("SELECT count(*) FROM citus_shards WHERE nodeport = %d"
                      " AND table_name = 'idempotency_records'::regclass" % port))


def test_rebalancing_onto_a_new_worker_under_load_loses_nothing(make_proxy, upstream, pg, key,
                                                                 ledger):
    if not pg.citus:
        pytest.skip("needs the Citus cluster (IDEMPROXY_TEST_CITUS=1)")
    proxies = [make_proxy(), make_proxy()]
    path = "/v1/orders?delay_ms=5"
    loads = [Load(p, "%s-%d" % (key, i), path, clients=2)
             for i, p in enumerate(proxies)]
    time.sleep(1.0)
    cluster = os.path.dirname(pg.dir)
    port = int(subprocess.run(["bash", os.path.join(ROOT, "scripts", "citus.sh"), "add-worker",
                               cluster], check=True, capture_output=True, text=True).stdout)
    assert shards_on(pg, port) == 0
    started = time.time()
    # Shards move by logical replication while the proxies keep writing; each move
    # blocks writes to its shard only for the final catch-up.
    pg.sql("SELECT citus_rebalance_start(shard_transfer_mode := 'force_logical')")
    pg.sql("SELECT citus_rebalance_wait()")
    took = time.time() - started
    time.sleep(0.5)
    delivered = {}
    for load in loads:
        delivered.update(load.stop())
    moved = shards_on(pg, port)
    print("rebalance: %d shards moved to the new worker in %.1f s, %d keys under load"
          % (moved, took, len(delivered)))
    assert moved > 0
    assert pg.sql("SELECT state FROM citus_rebalance_status() ORDER BY job_id DESC LIMIT 1") \
        == "finished"
    statuses = [r.status for r in delivered.values() if r is not None]
    assert len(statuses) == len(delivered) > 100
    assert set(statuses) == {201}  # no request failed while shards moved
    keys = sorted(delivered)
    with ThreadPoolExecutor(max_workers=8) as pool:  # a retry on either instance replays it
        finals = list(pool.map(lambda i: settle(proxies[i % 2], keys[i], path), range(len(keys))))
    not_replayed = [(k, final.status, final.body[:200], upstream.executions.count(key=k))
                    for k, final in zip(keys, finals)
                    if final.header("Idempotent-Replayed") != "true"]
    assert not_replayed == []
    for k, final in zip(keys, finals):
        ledger.check(upstream, k, [delivered[k]], final)
