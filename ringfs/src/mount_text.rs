//! The text forms of the daemon's documents: `ringfs stats` (a table, or
//! Prometheus's exposition format) and `ringfs status`.

use serde_json::Value;

/// Human-readable table of the stats document.
pub fn format_stats(v: &Value) -> String {
    let mut out = String::new();
    if let Some(d) = v["damaged"].as_str() {
        out += &format!("DAMAGED: {d}\n");
    }
    out += &format!("{:<20} {:>10} {:>10} {:>10} {:>10}\n", "opcode", "count", "p50 µs", "p90 µs", "p99 µs");
    if let Some(reqs) = v["requests"].as_object() {
        for (name, r) in reqs {
            out += &format!(
                "{:<20} {:>10} {:>10.1} {:>10.1} {:>10.1}\n",
                name,
                r["count"].as_u64().unwrap_or(0),
                r["p50_us"].as_f64().unwrap_or(0.0),
                r["p90_us"].as_f64().unwrap_or(0.0),
                r["p99_us"].as_f64().unwrap_or(0.0)
            );
        }
    }
    out += &format!("requests total:      {}\n", v["requests_total"]);
    out += &format!("bytes to daemon:     {}\n", v["bytes_to_daemon"]);
    out += &format!("bytes from daemon:   {}\n", v["bytes_from_daemon"]);
    out += &format!("store inodes:        {}\n", v["store"]["inodes"]);
    out += &format!("store chunks:        {} ({} bytes)\n", v["store"]["chunks"], v["store"]["chunk_bytes"]);
    out += &format!("files to store:      {} (changed, not hashed yet)\n", v["store"]["unstored"]);
    out += &format!("journal position:    {}\n", v["journal_position"]);
    out
}

/// The stats document in the Prometheus text exposition format.
pub fn format_prometheus(v: &Value) -> String {
    let mp = v["mountpoint"].as_str().unwrap_or("").replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = String::new();
    out += "# HELP ringfs_requests_total FUSE requests received, by opcode.\n# TYPE ringfs_requests_total counter\n";
    if let Some(reqs) = v["requests"].as_object() {
        for (name, r) in reqs {
            out += &format!("ringfs_requests_total{{mountpoint=\"{mp}\",opcode=\"{name}\"}} {}\n", r["count"]);
        }
        out += "# HELP ringfs_request_latency_us Time spent in the daemon per request, by opcode.\n# TYPE ringfs_request_latency_us summary\n";
        for (name, r) in reqs {
            for (q, k) in [("0.5", "p50_us"), ("0.9", "p90_us"), ("0.99", "p99_us")] {
                out += &format!(
                    "ringfs_request_latency_us{{mountpoint=\"{mp}\",opcode=\"{name}\",quantile=\"{q}\"}} {}\n",
                    r[k]
                );
            }
        }
    }
    for (metric, key, help) in [
        ("ringfs_bytes_to_daemon_total", &v["bytes_to_daemon"], "Request bytes read from the kernel."),
        ("ringfs_bytes_from_daemon_total", &v["bytes_from_daemon"], "Reply bytes written to the kernel."),
        ("ringfs_store_chunk_bytes", &v["store"]["chunk_bytes"], "Bytes of chunks in the store."),
        ("ringfs_store_chunks", &v["store"]["chunks"], "Chunks in the store."),
        ("ringfs_store_inodes", &v["store"]["inodes"], "Live inodes."),
        ("ringfs_journal_position", &v["journal_position"], "Last committed journal sequence number (sync position)."),
    ] {
        let kind = if metric.ends_with("_total") { "counter" } else { "gauge" };
        out += &format!("# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric}{{mountpoint=\"{mp}\"}} {key}\n");
    }
    out
}

/// Human-readable rendering of the status document.
pub fn format_status(v: &Value) -> String {
    let g = |path: &[&str]| -> String {
        let mut cur = v;
        for p in path {
            cur = &cur[*p];
        }
        match cur {
            Value::String(s) => s.clone(),
            Value::Null => "-".into(),
            other => other.to_string(),
        }
    };
    let mut out = String::new();
    out += &format!("mountpoint:       {}\n", g(&["mountpoint"]));
    out += &format!("daemon pid:       {}\n", g(&["pid"]));
    out += &format!("store:            {}\n", g(&["store"]));
    if let Some(d) = v["damaged"].as_str() {
        out += &format!("DAMAGED:          {d}\n");
    }
    out += &format!("transport:        {} (requested {})\n", g(&["transport", "summary"]), g(&["transport", "requested"]));
    out += &format!(
        "queues:           {} x {} entries, {} pool/worker threads\n",
        g(&["transport", "queues"]),
        g(&["transport", "queue_depth"]),
        g(&["transport", "workers"])
    );
    out += &format!("protocol:         {} (max_write {})\n", g(&["kernel", "protocol"]), g(&["kernel", "max_write"]));
    let pt = if v["features"]["passthrough"]["enabled"].as_bool() == Some(true) {
        "on".to_string()
    } else {
        format!("off ({})", g(&["features", "passthrough", "reason"]))
    };
    out += &format!("passthrough:      {pt}\n");
    out += &format!("readdirplus:      {}\n", g(&["features", "readdirplus"]));
    out += &format!("mount options:    {} (atime: {})\n", g(&["mount", "options"]), g(&["mount", "atime"]));
    out += &format!("open files limit: {}\n", g(&["mount", "open_files_limit"]));
    let pats: Vec<String> = v["local_only"]["patterns"].as_array().map(|a| a.iter().filter_map(|p| p.as_str().map(str::to_string)).collect()).unwrap_or_default();
    if pats.is_empty() {
        out += "local-only:       none\n";
    } else {
        out += &format!(
            "local-only:       {} ({} inodes in {})\n",
            pats.join(" "),
            g(&["local_only", "inodes"]),
            g(&["local_only", "dir"])
        );
    }
    let nr = &v["native_roots"];
    let list = nr["roots"].as_array().cloned().unwrap_or_default();
    if nr["enabled"].as_bool() == Some(true) {
        out += &format!("native roots:     {} ({})\n", list.len(), g(&["native_roots", "mode"]));
    } else {
        out += &format!("native roots:     off ({})\n", g(&["native_roots", "reason"]));
    }
    for r in &list {
        out += &format!("  {}  {}  <- {}\n", r["path"].as_str().unwrap_or("?"), r["state"].as_str().unwrap_or("?"), r["backing"].as_str().unwrap_or("?"));
    }
    out += &format!("locks:            {}\n", g(&["features", "locks"]));
    out += &format!("inodes:           {}\n", g(&["store_stats", "inodes"]));
    out += &format!("chunks:           {} ({} bytes)\n", g(&["store_stats", "chunks"]), g(&["store_stats", "chunk_bytes"]));
    out += &format!("journal position: {}\n", g(&["store_stats", "journal_position"]));
    out += &format!("dirty:            {}\n", g(&["store_stats", "dirty"]));
    out
}
