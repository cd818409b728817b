"""Reports: the text report a drill prints (and each fault's progress
line); the JSON report is the dict drill.Drill.run returns, written by
__main__.

Lives here: formatting only. Must not: compute a number or decide a
verdict (verdict.py and drill.py do; a report shows what they found).
"""


def format_fault(e):
    text = "+%6.2fs  %s  ->" % (e["at"], " ".join(e["fault"].split()))
    if "skipped" in e:
        return text + " SKIPPED: " + e["skipped"]
    if "error" in e:
        return text + " FAILED: " + e["error"]
    return text + " %s (%.2fs)" % (e.get("result", ""), e["done"] - e["at"])


def format_finding(e):
    return "  %-26s %s%s%s" % (
        e["kind"], "key=%s " % e["key"] if "key" in e else "",
        "node=%s " % e["node"] if "node" in e else "", e.get("detail", ""))


def text_report(r, json_path):
    out = []
    add = out.append
    add("oncegate drill %s: %s" % (r["drill"], r["verdict"]))
    if r.get("description"):
        add("  %s" % r["description"])
    if r["verdict"] == "SKIPPED":
        add("  SKIPPED: %s" % r["reason"])
        return "\n".join(out)
    if r["verdict"] == "ERROR":
        add("  the drill could not run: %s" % r["reason"])
        if r.get("seed") is not None:
            add("  seed %d" % r["seed"])
        if r.get("work_dir"):
            add("  logs and data: %s" % r["work_dir"])
        return "\n".join(out)
    where = {"local": "%d local node%s (%s)" % (
        r["nodes"], "s" if r["nodes"] > 1 else "", r["network"]),
        "config-dir": "%d local nodes from a config dir" % r["nodes"],
        "targets": "%d running nodes (--targets)" % r["nodes"]}[r["mode"]]
    add("  %s, %s, seed %d, %.1fs" % (
        where, "Raft cluster" if r["clustered"] else "single node",
        r["seed"], r["duration_s"]))
    s = r["summary"]
    add("")
    add("traffic: %d signals (%s), %d attempts; new signals until +%.1fs"
        % (s["signals"], ", ".join("%s %d" % kv for kv in
                                   sorted(s["signals_by_sender"].items())),
           s["attempts"], r["timeline"]["traffic_end"]))
    if s["client_backlog_max_s"] > 0.5:
        add("  (the drill's client fell behind by up to %.1fs: attempts "
            "waited for a free connection; raise [traffic] concurrency)"
            % s["client_backlog_max_s"])
    add("")
    add("faults (drill time, action, what happened):")
    shown = r["faults"] if len(r["faults"]) <= 24 else \
        r["faults"][:12] + [None] + r["faults"][-6:]
    for e in shown:
        add("  ..." if e is None else "  " + format_fault(e))
    if not r["faults"]:
        add("  none")
    for sk in r["skipped"]:
        add("  skipped %s: %s" % (sk["fault"], sk["reason"]))
    add("")
    add("ground truth (upstream executions per key, node databases %s):"
        % (",".join(map(str, r["databases_checked"])) or "not read"))
    add("  duplicate executions           %6d   keys executed more than once"
        % s["duplicates"])
    add("  lost acknowledged decisions    %6d   acknowledged keys missing or "
        "executed again" % s["lost"])
    add("  acknowledged keys              %6d   answered 2xx or 409 duplicate:"
        " exactly one execution each" % s["acknowledged"])
    add("  keys executed                  %6d" % s["executed"])
    add("  keys never executed            %6d   senders gave up (5xx, "
        "timeouts) or still retrying" % s["never_executed"])
    add("  signals answered in doubt      %6d   502/504 or 409 in-doubt: "
        "never re-executed" % s["in_doubt_answers"])
    add("  records in doubt / in flight   %6d / %d" % (
        s["records_in_doubt"], s["records_in_flight"]))
    if s.get("accepted"):
        add("  accepted for delivery (202)    %6d   each delivered exactly "
            "once; queued %d, failed %d at the end" % (
                s["accepted"], s.get("records_queued", 0),
                s.get("records_failed", 0)))
    add("  keys resent after recovery     %6d   each must be a duplicate"
        % s["resent"])
    add("  renewed live keys              %6d   executed again or re-recorded"
        " within their TTL" % s.get("renewed", 0))
    add("  early purges                   %6d   acknowledged or executed keys"
        " gone from a node within their TTL" % s.get("early_purges", 0))
    add("  records stamped off the clock  %6d   first_seen not the real time"
        " (+-%s), or expires_at not a TTL on" % (
            s.get("bad_stamps", 0), r.get("stamp_tolerance", "?")))
    a = r["availability"]
    add("")
    add("availability (windows without a successful decision > %gs):"
        % a["gap_s"])
    add("  %d windows, %.2fs in total, longest %.2fs; recovery after the "
        "faults %s" % (len(a["windows"]), a["total_s"], a["longest_s"],
                       "%.2fs" % a["recovery_s"] if a["recovery_s"]
                       is not None else "FAILED"))
    for w in sorted(a["windows"], key=lambda w: -w["duration"])[:8]:
        add("    +%.2fs .. +%.2fs  %.2fs" % (w["start"], w["end"],
                                             w["duration"]))
    pa = r.get("partitions")
    if pa:
        add("")
        add("partitions (%d): the longest a request waited for its decision"
            " at a node no fault touched (%s)"
            % (pa["partitions"], ", ".join(map(str, pa["nodes_measured"]))
               or "none"))

        def secs(x):
            return "-" if x is None else "%.2fs" % x
        add("  partitions whose leader a fault hit %s, the others %s"
            % (secs(pa["hit_longest_wait_s"]),
               secs(pa["others_longest_wait_s"])))
        for p in pa["per_partition"]:
            add("    partition %-3d %s %5d signals, longest wait %.2fs, "
                "%d windows > %gs" % (p["partition"],
                                     "hit " if p["hit"] else "    ",
                                     p["signals"], p["longest_wait_s"],
                                     len(p["windows"]), pa["gap_s"]))
    add("")
    add("latency (ms)        count     p50     p99     max")
    for name in ("attempt", "decision"):
        lat = r["latency_ms"][name]
        if lat["count"]:
            add("  %-16s %7d %7.1f %7.1f %7.1f" % (
                name, lat["count"], lat["p50"], lat["p99"], lat["max"]))
    add("")
    add("answers: " + "  ".join("%s %d" % kv for kv in
                                r["statuses"].items()))
    for title, entries, shown in (
            ("VIOLATIONS (%d):", r["violations"], 25),
            ("WARNINGS (%d, not violations; see docs/drills.md):",
             r["warnings"], 10)):
        if entries:
            add("")
            add(title % len(entries))
            out.extend(format_finding(e) for e in entries[:shown])
            if len(entries) > shown:
                add("  ... %d more in the JSON report"
                    % (len(entries) - shown))
    add("")
    add("verdict: %s (%d violations, %d warnings)" % (
        r["verdict"], len(r["violations"]), len(r["warnings"])))
    if json_path:
        add("JSON report: %s" % json_path)
    if r.get("work_dir") and r["verdict"] != "PASS":
        add("node logs and data kept in %s" % r["work_dir"])
    return "\n".join(out)
