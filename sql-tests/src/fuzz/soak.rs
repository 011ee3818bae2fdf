//! The soak test: many sessions running scripts and Rust UDFs on simulated GPUs for minutes while
//! a chaos thread SIGKILLs random Python workers and cancels random statements; at the end no
//! lease is held, no worker or zombie remains, the catalog is intact and memory is back near its
//! start. `accelsql-fuzz soak --minutes 5` runs it; `sql-tests/tests/fuzz.rs` runs a short one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use accelsql_engine::Result;

use super::grammar;
use super::mutate::Rng;

/// How long and how wide a soak runs.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Sessions running statements at once.
    pub sessions: usize,
    /// How long they run.
    pub duration: Duration,
    /// The random seed.
    pub seed: u64,
}

/// What a soak did, and what it found at the end.
#[derive(Debug, Default)]
pub struct SoakReport {
    /// Statements that ran to the end.
    pub statements: u64,
    /// Statements cancelled by the chaos (dropped mid-run).
    pub cancels: u64,
    /// Workers SIGKILLed by the chaos thread.
    pub kills: u64,
    /// Failed statements, by error code.
    pub failures: BTreeMap<String, u64>,
    /// The first message seen for each code.
    pub examples: BTreeMap<String, String>,
    /// Problems found at the end (empty: the soak passed).
    pub problems: Vec<String>,
    /// Resident memory before and after, in MiB.
    pub rss_mib: (f64, f64),
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failures: Vec<String> = self
            .failures
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect();
        writeln!(
            f,
            "soak: {} statements, {} cancelled, {} workers killed, failures by code: {}",
            self.statements,
            self.cancels,
            self.kills,
            if failures.is_empty() {
                "none".to_string()
            } else {
                failures.join(" ")
            }
        )?;
        for (code, example) in &self.examples {
            let first = example.lines().next().unwrap_or_default();
            writeln!(
                f,
                "  {code} e.g.: {}",
                first.chars().take(200).collect::<String>()
            )?;
        }
        writeln!(
            f,
            "  resident memory: {:.0} MiB at the start, {:.0} MiB at the end",
            self.rss_mib.0, self.rss_mib.1
        )?;
        if self.problems.is_empty() {
            writeln!(
                f,
                "  end state: no lease held, no worker or zombie left, catalog intact"
            )
        } else {
            for p in &self.problems {
                writeln!(f, "PROBLEM: {p}")?;
            }
            Ok(())
        }
    }
}

/// The statements the sessions pick from: Rust UDFs on the GPUs and the CPU, Python scripts
/// (SCALAR, SET RETURNS, SET EMITS, one slow enough to be killed or cancelled mid-run).
const STATEMENTS: &[&str] = &[
    "SELECT count(gpu_probe_required()) FROM t",
    "SELECT sum(haversine_km(x, x, 1.0, 2.0)) FROM t",
    "SELECT g, group_sum(x) FROM t GROUP BY g",
    "SELECT group_probe(x) FROM t GROUP BY iproc()",
    "SELECT sum(py_twice(x)) FROM t",
    "SELECT g, py_count(x) FROM t GROUP BY g",
    "SELECT py_emit(x) FROM t GROUP BY g",
    "SELECT py_slow(x) FROM t WHERE id < 40 GROUP BY g",
    "SELECT count(*) FROM (SELECT explode(g) FROM t)",
];

const SLOW_SCRIPT: &str = "CREATE OR REPLACE PYTHON3 SET SCRIPT py_slow(x DOUBLE) EMITS (y DOUBLE) AS\n\
%perInstanceRequiredAcceleratorDevices GpuNvidia|None;\n\
import time\n\
def run(ctx):\n    while True:\n        time.sleep(0.01)\n        ctx.emit(ctx.x)\n        if not ctx.next():\n            break\n/";

/// Runs the soak and checks the end state.
pub async fn run(config: &SoakConfig) -> Result<SoakReport> {
    let engine = super::fuzz_engine()?;
    let admin = engine.session();
    for sql in grammar::SETUP
        .iter()
        .chain(grammar::SCRIPTS)
        .chain([&SLOW_SCRIPT])
    {
        admin.sql(sql).await?;
    }
    // Warm up (fork server, first workers) before measuring memory.
    admin.sql("SELECT sum(py_twice(x)) FROM t").await?;
    let scripts_before = admin
        .sql("SELECT name FROM accelsql.scripts ORDER BY name")
        .await?;
    let rss_start = rss_mib();

    let stop = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicU64::new(0));
    let chaos = {
        let (stop, kills) = (Arc::clone(&stop), Arc::clone(&kills));
        let seed = config.seed;
        std::thread::spawn(move || {
            let mut rng = Rng::new(seed ^ 0xc4a05);
            while !stop.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(100 + rng.below(300) as u64));
                // Spares too: a killed spare is replaced.
                let workers = workers(true);
                if !workers.is_empty() {
                    let pid = *rng.pick(&workers);
                    // SAFETY: kill(2) on a pid that is (or just was) one of our workers.
                    if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                        kills.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };

    let deadline = Instant::now() + config.duration;
    let mut tasks = Vec::new();
    for i in 0..config.sessions {
        let session = engine.session();
        let seed = config.seed.wrapping_add(i as u64 * 7919);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed);
            let mut counts = (0u64, 0u64, BTreeMap::<String, (u64, String)>::new());
            let failed = |counts: &mut (u64, u64, BTreeMap<String, (u64, String)>),
                          e: accelsql_engine::EngineError| {
                let entry = counts
                    .2
                    .entry(e.code().to_string())
                    .or_insert_with(|| (0, e.to_string()));
                entry.0 += 1;
            };
            for sql in grammar::SETUP {
                if let Err(e) = session.sql(sql).await {
                    failed(&mut counts, e);
                    return counts;
                }
            }
            while Instant::now() < deadline {
                let sql = *rng.pick(STATEMENTS);
                if rng.chance(15) {
                    let after = Duration::from_millis(1 + rng.below(300) as u64);
                    match tokio::time::timeout(after, session.sql(sql)).await {
                        Err(_) => counts.1 += 1,
                        Ok(Ok(_)) => counts.0 += 1,
                        Ok(Err(e)) => failed(&mut counts, e),
                    }
                } else {
                    match session.sql(sql).await {
                        Ok(_) => counts.0 += 1,
                        Err(e) => failed(&mut counts, e),
                    }
                }
            }
            counts
        }));
    }
    let mut report = SoakReport::default();
    for task in tasks {
        match task.await {
            Ok((done, cancelled, failures)) => {
                report.statements += done;
                report.cancels += cancelled;
                for (code, (n, example)) in failures {
                    *report.failures.entry(code.clone()).or_default() += n;
                    report.examples.entry(code).or_insert(example);
                }
            }
            Err(e) => report.problems.push(format!("a session task failed: {e}")),
        }
    }
    stop.store(true, Ordering::Release);
    let _ = chaos.join();
    report.kills = kills.load(Ordering::Relaxed);

    if let Some(example) = report.examples.get("XX000") {
        report
            .problems
            .push(format!("an internal error: {example}"));
    }
    // The end state.
    let queue = engine.lease_queue().snapshot();
    if queue.holder.is_some() || !queue.waiting.is_empty() {
        report.problems.push(format!(
            "the lease is still held ({:?}) or waited for ({} waiting)",
            queue.holder,
            queue.waiting.len()
        ));
    }
    match admin
        .sql("SELECT name FROM accelsql.scripts ORDER BY name")
        .await
    {
        Ok(after) if after == scripts_before => {}
        Ok(_) => report.problems.push("the script catalog changed".into()),
        Err(e) => report
            .problems
            .push(format!("the script catalog cannot be read: {e}")),
    }
    match admin.sql("SELECT sum(py_twice(x)) FROM t").await {
        Ok(_) => {}
        Err(e) => report
            .problems
            .push(format!("a script no longer runs after the soak: {e}")),
    }
    drop(admin);
    drop(engine);
    // Workers end when their statements do; give the last ones a moment to be reaped.
    let settle = Instant::now() + Duration::from_secs(10);
    let (mut left, mut zombie_pids) = (workers(false), zombies());
    while (!left.is_empty() || !zombie_pids.is_empty()) && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(100)).await;
        (left, zombie_pids) = (workers(false), zombies());
    }
    if !left.is_empty() {
        report
            .problems
            .push(format!("workers still running: {left:?}"));
    }
    if !zombie_pids.is_empty() {
        report
            .problems
            .push(format!("zombie processes: {zombie_pids:?}"));
    }
    let rss_end = rss_mib();
    report.rss_mib = (rss_start, rss_end);
    if rss_end > rss_start * 1.5 + 256.0 {
        report.problems.push(format!(
            "resident memory grew from {rss_start:.0} MiB to {rss_end:.0} MiB"
        ));
    }
    Ok(report)
}

/// (pid, state, ppid, command line) of every process on the machine.
fn processes() -> Vec<(i32, char, i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 2..];
        let mut fields = rest.split(' ');
        let state = fields.next()?.chars().next()?;
        let ppid = fields.next()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        Some((
            pid,
            state,
            ppid,
            String::from_utf8_lossy(&cmdline).replace('\0', " "),
        ))
    })
    .collect()
}

/// Our Python workers: children of our fork servers, and children of ours that are not one;
/// with `spares` false, not the spares the fork servers keep forked ahead (no statement's).
fn workers(spares: bool) -> Vec<i32> {
    let me = std::process::id() as i32;
    // Listed before the processes are: a spare forked in between is found by the next look.
    let spare_pids: Vec<i32> = if spares {
        Vec::new()
    } else {
        accelsql_engine::udf_runtime::script::warm_starts()
            .iter()
            .filter_map(|w| w.spare_pid)
            .filter_map(|p| i32::try_from(p).ok())
            .collect()
    };
    let all = processes();
    let servers: Vec<i32> = all
        .iter()
        .filter(|p| p.2 == me && p.3.contains("--accelsql-fork-server"))
        .map(|p| p.0)
        .collect();
    all.iter()
        .filter(|p| p.1 != 'Z')
        .filter(|p| servers.contains(&p.2) || (p.2 == me && !servers.contains(&p.0)))
        .filter(|p| !spare_pids.contains(&p.0))
        .map(|p| p.0)
        .collect()
}

/// Zombies among our children and our fork servers' children.
fn zombies() -> Vec<i32> {
    let me = std::process::id() as i32;
    let all = processes();
    let ours: Vec<i32> = all.iter().filter(|p| p.2 == me).map(|p| p.0).collect();
    all.iter()
        .filter(|p| p.1 == 'Z' && (p.2 == me || ours.contains(&p.2)))
        .map(|p| p.0)
        .collect()
}

/// This process's resident memory in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
