//! Hot reload: a change is compiled in the background and swapped in for the
//! next run; a run in flight keeps the version it started with; a broken edit
//! keeps the last good version and reports file and line.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use cradle::project::{Loaded, Project, RunRequest};
use cradle::reload::{self, Live, ReloadEvent};
use cradle_tests::{Fixture, plugin_wasm};

const CONFIG: &str = r#"
default_environment = "demo"
state_dir = "state"
[clusters.sim]
kind = "sim"
[environments.demo]
cluster = "sim"
backend = "sample"
[plugins.sample]
path = "plugins/sample.wasm"
"#;

fn version_script(v: i64) -> String {
    format!("fn version() {{ let i = 0; while i < 200000 {{ i += 1; }} {v} }}\n")
}

struct Env {
    fixture: Fixture,
    project: Arc<Project>,
    live: Arc<Live>,
    events: Receiver<ReloadEvent>,
    _watcher: reload::Watcher,
    rt: tokio::runtime::Runtime,
}

fn env() -> Env {
    let fixture = Fixture::new(CONFIG, &[("app.rhai", &version_script(1))]);
    std::fs::create_dir_all(fixture.dir.path().join("plugins")).expect("mkdir");
    std::fs::copy(plugin_wasm("sample"), fixture.dir.path().join("plugins/sample.wasm")).expect("copy plugin");
    let project = Arc::new(Project::open(&fixture.config(), None).expect("open"));
    let live = Arc::new(Live::new(project.load().expect("load")));
    let (tx, events) = channel();
    let watcher = reload::watch(project.clone(), live.clone(), move |e| {
        let _ = tx.send(e);
    })
    .expect("watch");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
    Env { fixture, project, live, events, _watcher: watcher, rt }
}

impl Env {
    fn version(&self, loaded: Arc<Loaded>) -> i64 {
        let project = self.project.clone();
        let req = RunRequest { script: "app".into(), func: "version".into(), ..Default::default() };
        let report = self
            .rt
            .block_on(
                async move { tokio::task::spawn_blocking(move || project.run(&loaded, req)).await.expect("join") },
            )
            .expect("run");
        report.result.expect("version()").as_int().expect("int")
    }

    /// The next reload event; file watching is asynchronous, so this waits
    /// (bounded) for the watcher thread rather than asserting on time.
    fn next_event(&self) -> ReloadEvent {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.events.recv_timeout(Duration::from_millis(100)) {
                Ok(e) => return e,
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => continue,
                Err(e) => panic!("no reload event: {e:?}"),
            }
        }
    }
}

#[test]
fn an_edit_is_swapped_in_for_the_next_run_while_a_run_in_flight_keeps_its_version() {
    let env = env();
    let before = env.live.current();
    assert_eq!(env.version(before.clone()), 1);
    let in_flight = {
        let (project, loaded) = (env.project.clone(), before.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
            let _guard = rt.enter();
            let req = RunRequest { script: "app".into(), func: "version".into(), ..Default::default() };
            project.run(&loaded, req).expect("run").result.expect("ok").as_int().expect("int")
        })
    };
    env.fixture.write_script("app.rhai", &version_script(2));
    match env.next_event() {
        ReloadEvent::Swapped { changed, .. } => assert!(changed.iter().any(|p| p.ends_with("app.rhai")), "{changed:?}"),
        ReloadEvent::Failed { error, .. } => panic!("reload failed: {error}"),
    }
    assert_eq!(in_flight.join().expect("thread"), 1, "the run in flight finished on its own version");
    assert_eq!(env.version(env.live.current()), 2, "the next run uses the new version");
    assert_eq!(env.version(before), 1, "an old handle keeps its version");
}

#[test]
fn a_broken_edit_keeps_the_last_good_version_and_names_file_and_line() {
    let env = env();
    let good = env.live.current().workflows.hash().to_string();
    env.fixture.write_script("app.rhai", "fn version() {\n    let x = ;\n}\n");
    match env.next_event() {
        ReloadEvent::Failed { error, .. } => {
            let msg = error.to_string();
            assert!(msg.contains("app.rhai:2:"), "{msg}");
        }
        ReloadEvent::Swapped { .. } => panic!("a broken script was swapped in"),
    }
    assert_eq!(env.live.current().workflows.hash(), good);
    assert_eq!(env.version(env.live.current()), 1);
    env.fixture.write_script("app.rhai", &version_script(3));
    // Under load the watcher can report the broken write a second time (its
    // events split across two debounce windows) before the fix arrives: such a
    // late `Failed` must still name the broken line, and the fix must swap in.
    loop {
        match env.next_event() {
            ReloadEvent::Swapped { .. } => break,
            ReloadEvent::Failed { error, .. } => {
                let msg = error.to_string();
                assert!(msg.contains("app.rhai:2:"), "only the broken edit may fail: {msg}");
                assert_eq!(env.version(env.live.current()), 1, "a failed reload keeps the last good version");
            }
        }
    }
    assert_eq!(env.version(env.live.current()), 3);
}

#[test]
fn a_rebuilt_plugin_file_triggers_a_reload() {
    let env = env();
    let wasm = env.fixture.dir.path().join("plugins/sample.wasm");
    let bytes = std::fs::read(&wasm).expect("read");
    std::fs::write(&wasm, &bytes).expect("rewrite");
    match env.next_event() {
        ReloadEvent::Swapped { changed, .. } => assert!(changed.contains(&wasm), "{changed:?}"),
        ReloadEvent::Failed { error, .. } => panic!("{error}"),
    }
    std::fs::write(&wasm, b"not wasm").expect("break the plugin");
    match env.next_event() {
        ReloadEvent::Failed { error, .. } => assert!(error.to_string().contains("sample.wasm"), "{error}"),
        ReloadEvent::Swapped { .. } => panic!("a broken plugin was swapped in"),
    }
    assert_eq!(env.version(env.live.current()), 1, "the last good version still runs");
}
