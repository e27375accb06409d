#!/usr/bin/env python3
"""A reproducer, without idemproxy, for a committed row lost by a Citus shard move
(docs/SCALING.md, "Shard moves"). Needs only psql and a Citus cluster whose nodes run
at synchronous_commit=off (scripts/citus.sh start DIR):

    scripts/citus_move_repro.py DSN MODE [MOVES]

Two psql sessions insert rows into a 4-shard distributed table through the
coordinator, each row in autocommit, and print the id of every row the server
acknowledged. Meanwhile shards move between the first two workers by logical
replication (citus_move_shard_placement, force_logical). Then every acknowledged id
is looked up. MODE says how the writers commit:
  default  the nodes' default (off here): rows are lost
  session  SET synchronous_commit = on in the writer's coordinator session: not
           propagated to the workers' connections, rows are still lost
  local    BEGIN; SET LOCAL synchronous_commit = on; INSERT; COMMIT, with
           citus.propagate_set_commands = 'local': nothing is lost
Prints "acknowledged N, lost M" and exits 1 when M > 0."""
import subprocess
import sys
import threading
import time

dsn, mode = sys.argv[1], sys.argv[2]
moves = int(sys.argv[3]) if len(sys.argv) > 3 else 12


def sql(query):
    return subprocess.run(["psql", dsn, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", query],
                          check=True, capture_output=True, text=True).stdout.strip()


sql("DROP TABLE IF EXISTS move_repro")
sql("CREATE TABLE move_repro (id bigint PRIMARY KEY, at timestamptz DEFAULT now())")
sql("SELECT create_distributed_table('move_repro', 'id', shard_count := 4)")
ports = [int(p) for p in sql("SELECT nodeport FROM pg_dist_node WHERE groupid <> 0"
                             " ORDER BY nodeport").split()][:2]
stop = threading.Event()
acknowledged = []


def writer(n):
    head = {"default": "", "session": "SET synchronous_commit = on;\n",
            "local": "SET citus.propagate_set_commands = 'local';\n"}[mode]
    p = subprocess.Popen(["psql", dsn, "-qAt", "-v", "ON_ERROR_STOP=0"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def feed():
        p.stdin.write(head)
        i = 0
        while not stop.is_set():
            row = n * 10**9 + i
            i += 1
            insert = "INSERT INTO move_repro (id) VALUES (%d) RETURNING id;" % row
            if mode == "local":
                insert = ("BEGIN; SET LOCAL synchronous_commit = on; %s COMMIT;" % insert)
            # Paced, as a service's writes are: at a high rate WAL pages fill and are
            # written at once, and the window closes.
            p.stdin.write(insert + " SELECT pg_sleep(0.004);\n")
        p.stdin.close()

    feeder = threading.Thread(target=feed)
    feeder.start()
    for line in p.stdout:  # one line per acknowledged row, in commit order
        if line.strip().isdigit():
            acknowledged.append(int(line))
    feeder.join()
    p.wait()


writers = [threading.Thread(target=writer, args=(n,)) for n in (1, 2)]
for t in writers:
    t.start()
time.sleep(1)
for m in range(moves):
    shard, port = sql("SELECT shardid, nodeport FROM citus_shards WHERE table_name ="
                      " 'move_repro'::regclass ORDER BY shardid LIMIT 1 OFFSET %d" % (m % 4)
                      ).split("|")
    target = ports[1] if int(port) == ports[0] else ports[0]
    sql("SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %d,"
        " shard_transfer_mode := 'force_logical')" % (shard, port, target))
stop.set()
for t in writers:
    t.join()
present = set(int(v) for v in sql("SELECT id FROM move_repro").split())
lost = sorted(set(acknowledged) - present)
print("mode %s: %d moves, acknowledged %d, lost %d%s" % (
    mode, moves, len(acknowledged), len(lost), (" (ids %s)" % lost[:10]) if lost else ""))
sys.exit(1 if lost else 0)
