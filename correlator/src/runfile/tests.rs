//! Unit tests of the run file: old rows, the compact format, the journal.

use super::*;
use crate::timeline::{OffCpu, Timeline};

#[derive(Deserialize)]
struct Rows {
    #[serde(deserialize_with = "rows_padded")]
    buckets: Vec<BucketRow>,
}

/// The recorder pins itself; the run file must still say how many CPUs
/// the machine has.
#[test]
fn environment_counts_the_machines_cpus_not_the_threads() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|l| crate::cpu::parse_cpu_list(l.trim()))
        .map(|c| c.len())
        .expect("online CPUs");
    let _pinned = crate::cpu::PinnedThread::to(&[0]).expect("pin");
    assert_eq!(Environment::current().cpus, online);
}

#[test]
fn rows_from_older_files_read_as_zero_padded() {
    let old: Rows = serde_json::from_str(r#"{"buckets": [[7, [1,2,3,4,5,6,7,8,9,10,11]]]}"#)
        .expect("older row");
    let mut want = [0; NUM_COUNTERS];
    for (i, w) in want.iter_mut().take(11).enumerate() {
        *w = i as u64 + 1;
    }
    assert_eq!(old.buckets, vec![(7, want)]);
    let too_long = format!(r#"{{"buckets": [[7, {:?}]]}}"#, vec![1; NUM_COUNTERS + 1]);
    assert!(serde_json::from_str::<Rows>(&too_long).is_err());
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("correlator-runfile-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

fn as_json(run: &RunFile) -> serde_json::Value {
    serde_json::to_value(run).expect("json")
}

/// The compact file and the JSON export hold the same run, and the
/// compact one is far smaller.
#[test]
fn compact_and_json_files_load_as_the_same_run() {
    let run = crate::harness::synthetic::run(8, 35_000, 2_000);
    let (bin, json) = (scratch("a.run"), scratch("a.json"));
    run.save(&bin).expect("save compact");
    run.save(&json).expect("save json");
    let want = as_json(&run);
    assert_eq!(as_json(&RunFile::load(&bin).expect("load compact")), want);
    assert_eq!(as_json(&RunFile::load(&json).expect("load json")), want);
    let size = |p: &Path| fs::metadata(p).expect("size").len();
    assert!(
        size(&json) >= 20 * size(&bin),
        "compact {} B vs JSON {} B",
        size(&bin),
        size(&json)
    );
}

fn offcpu(tid: u32, start_ns: u64) -> OffCpu {
    OffCpu {
        tid,
        tgid: tid,
        preempted: false,
        cpu_out: 0,
        cpu_in: 1,
        start_ns,
        end_ns: start_ns + 1_000_000,
        runnable_ns: 0,
        blocked_ns: 1_000_000,
        next_pid: 0,
        next_comm: "".into(),
        syscall: Some(202),
        site: crate::timeline::syscalls::Site::Lock,
        kstack: None,
        ustack: None,
        waker: None,
        moved_ns: 1_234,
    }
}

fn start() -> compact::Start {
    compact::Start {
        schema: SCHEMA.into(),
        correlator_version: "test".into(),
        target: Target {
            pid: 1,
            comm: "t".into(),
            cmdline: "t".into(),
        },
        follow_children: false,
        started_ns: 1_000,
        bucket_ns: 1_000_000,
        counter_names: vec![],
        account_names: ACCOUNT_NAMES.map(String::from).to_vec(),
        min_offcpu_record_ns: 50_000,
        sample_period_ns: 0,
        syscall_time: Default::default(),
        thread_names: BTreeMap::from([(1, "t".to_string())]),
        environment: Environment::default(),
        passive: Some(crate::latency::passive::PassiveSource::Uprobe {
            binary: "t".into(),
            symbol: "serve".into(),
            every: 1,
        }),
    }
}

/// A journal without its complete frame reads as the run up to its
/// last whole frame: a bucket counted again by a later drain holds its
/// latest counts, records appear once, a torn tail is skipped and the
/// notes say what is missing.
#[test]
fn a_journal_cut_anywhere_reads_up_to_its_last_whole_frame() {
    let path = scratch("j.run");
    let mut j = journal::Journal::create(&path, start()).expect("create");
    let mut t = Timeline::new(1_000_000, 100);
    t.track_touched();
    let mut counts = [0; NUM_COUNTERS];
    counts[Counter::PageFaultsMinor as usize] = 3;
    t.add_bucket(5, &counts);
    t.push_offcpu(offcpu(1, 5_000_000));
    let call = |start_ns: u64| compact::Request {
        fd: correlator_common::UPROBE_FD,
        reads: 1,
        start_ns,
        end_ns: start_ns + 30_000,
        last_start_ns: start_ns,
        ..Default::default()
    };
    let mut requests = vec![call(1_000_000_000), call(1_500_000_000)];
    j.append(&mut t, &[], &mut requests, 2_000_000_000)
        .expect("append");
    assert!(requests.is_empty(), "the journal takes the requests");
    t.add_bucket(5, &counts); // a late CPU's drain of the same bucket
    t.add_bucket(9, &counts);
    t.push_offcpu(offcpu(1, 9_000_000));
    requests.push(call(2_500_000_000));
    j.append(&mut t, &[], &mut requests, 3_000_000_000)
        .expect("append");
    j.flush().expect("flush");
    let whole = fs::read(&path).expect("read");
    // The third frame is torn: only its first 10 bytes reached the disk.
    t.push_offcpu(offcpu(1, 12_000_000));
    requests.push(call(3_500_000_000));
    j.append(&mut t, &[], &mut requests, 4_000_000_000)
        .expect("append");
    j.flush().expect("flush");
    let full = fs::read(&path).expect("read");
    fs::write(&path, &full[..whole.len() + 10]).expect("tear");
    let run = RunFile::load(&path).expect("load journal");
    assert_eq!(run.stop_reason, StopReason::Unfinished);
    let six = {
        let mut c = [0; NUM_COUNTERS];
        c[Counter::PageFaultsMinor as usize] = 6;
        c
    };
    assert_eq!(run.buckets, vec![(5, six), (9, counts)]);
    assert_eq!(run.totals.page_faults_minor, 9);
    assert_eq!(run.offcpu, vec![offcpu(1, 5_000_000), offcpu(1, 9_000_000)]);
    assert_eq!(run.ended_ns, 3_000_000_000);
    let server = run
        .server_latency
        .as_ref()
        .expect("passive latency replayed");
    assert_eq!(
        server.stats.requests, 3,
        "the torn frame's request is not in it"
    );
    assert!(
        run.notes[0].contains("did not finish")
            && run.notes[0].contains("10 bytes of a torn frame"),
        "{:?}",
        run.notes
    );
    // Cut inside the magic or the first frame: a clear error.
    fs::write(&path, &full[..compact::MAGIC.len() + 3]).expect("cut");
    let err = RunFile::load(&path)
        .expect_err("no whole frame")
        .to_string();
    assert!(err.contains("holds no whole frame"), "{err}");
}
