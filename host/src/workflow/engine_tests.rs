//! Behaviour of loaded workflow sets: imports, compile errors, limits, steps,
//! backend calls and per-run contexts. Each test writes small scripts to a tempdir.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rhai::{Dynamic, EvalAltResult, Module, NativeCallContext};

use super::*;

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write script");
    }
}

pub(super) fn load_with(
    files: &[(&str, &str)],
    opts: &EngineOptions,
) -> (tempfile::TempDir, Result<WorkflowSet, WorkflowError>) {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), files);
    let set = WorkflowSet::load(dir.path(), opts);
    (dir, set)
}

fn load(files: &[(&str, &str)]) -> (tempfile::TempDir, WorkflowSet) {
    let (dir, set) = load_with(files, &EngineOptions::default());
    (dir, set.expect("the workflows load"))
}

pub(super) fn file(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

/// Records what the run reports.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl RunObserver for Recorder {
    fn step_started(&self, vm: Option<&str>, step: &str) {
        self.push(format!("start {step} {vm:?}"));
    }
    fn step_finished(&self, vm: Option<&str>, step: &str, error: Option<&str>) {
        self.push(format!("end {step} {vm:?} {error:?}"));
    }
    fn log(&self, level: tracing::Level, message: &str) {
        self.push(format!("{level} {message}"));
    }
}

impl Recorder {
    fn push(&self, line: String) {
        self.0.lock().expect("recorder lock").push(line);
    }
    fn lines(&self) -> Vec<String> {
        self.0.lock().expect("recorder lock").clone()
    }
}

#[test]
fn scripts_import_modules_from_lib_including_modules_importing_modules() {
    let (_dir, set) = load(&[
        ("lib/math.rhai", "fn double(x) { x * 2 }"),
        ("lib/steps.rhai", "import \"lib/math\" as math;\nfn quad(x) { math::double(math::double(x)) }"),
        ("provision.rhai", "import \"lib/steps\" as steps;\nfn main(x) { steps::quad(x) }"),
    ]);
    let out = set.call("provision", "main", vec![Dynamic::from_int(5)], RunContext::detached());
    assert_eq!(out.expect("the call succeeds").as_int(), Ok(20));
    let names: Vec<String> = set.modules().iter().map(|m| m.name.clone()).collect();
    assert_eq!(names, ["lib/math", "lib/steps"]);
}

#[test]
fn a_compile_error_in_lib_names_that_file_line_and_column() {
    let (dir, set) = load_with(
        &[("lib/steps.rhai", "fn ok() { 1 }\nfn bad() {\n    let x = ;\n}"), ("provision.rhai", "fn main() { 1 }")],
        &EngineOptions::default(),
    );
    let err = set.expect_err("the load fails");
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}:3:13: ", file(&dir, "lib/steps.rhai"))), "{text}");
    assert!(matches!(err, WorkflowError::Compile { line: 3, .. }));
}

#[test]
fn an_import_of_a_missing_module_fails_the_load_naming_the_importer() {
    let (dir, set) =
        load_with(&[("provision.rhai", "import \"lib/nope\" as x;\nfn main() { 1 }")], &EngineOptions::default());
    let text = set.expect_err("the load fails").to_string();
    assert!(text.starts_with(&format!("{}:1:", file(&dir, "provision.rhai"))), "{text}");
    assert!(text.contains("lib/nope"), "{text}");
}

#[test]
fn check_reports_every_broken_file_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        &[
            ("lib/bad.rhai", "fn f() {\n  let = 1;\n}"),
            ("uses_bad.rhai", "import \"lib/bad\" as bad;\nfn main() { bad::f() }"),
            ("broken.rhai", "fn main() {"),
            ("fine.rhai", "fn main() { 1 }"),
        ],
    );
    let errors = WorkflowSet::check(dir.path(), &EngineOptions::default()).expect_err("broken");
    let files: Vec<String> = errors
        .iter()
        .map(|e| match e {
            WorkflowError::Compile { file, .. } => file.clone(),
            other => other.to_string(),
        })
        .collect();
    assert_eq!(files, [file(&dir, "lib/bad.rhai"), file(&dir, "broken.rhai")]);
}

#[test]
fn an_import_cycle_is_reported() {
    let (_dir, set) = load_with(
        &[("lib/a.rhai", "import \"lib/b\" as b;"), ("lib/b.rhai", "import \"lib/a\" as a;")],
        &EngineOptions::default(),
    );
    let text = set.expect_err("the load fails").to_string();
    assert!(text.contains("import cycle: lib/a → lib/b → lib/a"), "{text}");
}

fn limited(limits: WorkflowLimits, script: &str) -> (tempfile::TempDir, WorkflowError) {
    let opts = EngineOptions { limits, ..EngineOptions::default() };
    let (dir, set) = load_with(&[("w.rhai", script)], &opts);
    let err = set.expect("loads").call("w", "main", vec![], RunContext::detached());
    (dir, err.expect_err("the run is stopped"))
}

#[test]
fn a_runaway_loop_stops_at_the_operations_limit_naming_the_config_key() {
    let limits = WorkflowLimits { max_operations: 10_000, ..WorkflowLimits::default() };
    let (dir, err) = limited(limits, "fn main() {\n  loop { }\n}");
    let text = err.to_string();
    assert!(matches!(err, WorkflowError::Limit { key: "max_operations", value: 10_000, .. }), "{text}");
    assert!(text.starts_with(&file(&dir, "w.rhai")), "{text}");
    assert!(
        text.contains("exceeded the operations limit of 10000") && text.contains("`[workflow] max_operations`"),
        "{text}"
    );
}

#[test]
fn deep_recursion_stops_at_the_call_depth_limit() {
    let limits = WorkflowLimits { max_call_depth: 16, ..WorkflowLimits::default() };
    let (_dir, err) = limited(limits, "fn down(n) { down(n + 1) }\nfn main() { down(0) }");
    assert!(matches!(err, WorkflowError::Limit { key: "max_call_depth", value: 16, .. }), "{err}");
}

#[test]
fn a_huge_string_stops_at_the_string_size_limit() {
    let limits = WorkflowLimits { max_string_size: 1000, ..WorkflowLimits::default() };
    let (_dir, err) = limited(limits, "fn main() { let s = \"x\"; loop { s += s; } }");
    assert!(matches!(err, WorkflowError::Limit { key: "max_string_size", .. }), "{err}");
}

#[test]
fn every_limit_a_run_can_hit_names_a_key_cradle_toml_accepts() {
    let limits = WorkflowLimits::default();
    let pos = rhai::Position::NONE;
    let hits = [
        EvalAltResult::ErrorTooManyOperations(pos),
        EvalAltResult::ErrorStackOverflow(pos),
        EvalAltResult::ErrorDataTooLarge("Length of string".into(), pos),
        EvalAltResult::ErrorDataTooLarge("Size of array/BLOB".into(), pos),
        EvalAltResult::ErrorDataTooLarge("Size of object map".into(), pos),
    ];
    for err in hits {
        let (what, _, key) = limits.hit(&err).unwrap_or_else(|| panic!("{err} is a limit"));
        let config: Result<crate::config::WorkflowConfig, _> = toml::from_str(&format!("{key} = 200"));
        assert!(config.is_ok(), "the {what} limit names `{key}`, which [workflow] must accept: {config:?}");
    }
}

#[test]
fn a_too_deep_expression_is_a_compile_error_that_names_no_missing_config_key() {
    let deep = format!("fn main() {{ {}1{} }}", "(".repeat(200), ")".repeat(200));
    let (_dir, set) = load_with(&[("w.rhai", deep.as_str())], &EngineOptions::default());
    let text = set.expect_err("too deep").to_string();
    assert!(text.contains("split the expression"), "{text}");
    assert!(!text.contains("max_expr_depth"), "{text}");
}

#[test]
fn a_step_error_names_the_step_the_vm_and_the_file_position() {
    let (dir, set) = load(&[
        ("lib/steps.rhai", "fn fail(why) {\n    throw why;\n}"),
        (
            "provision.rhai",
            "import \"lib/steps\" as steps;\nfn main() {\n    step(\"test-0\", \"outer\", || {\n        step(\"test-0\", \"create\", || steps::fail(\"boom\"))\n    })\n}",
        ),
    ]);
    let observer = Arc::new(Recorder::default());
    let run = RunContext::new(observer.clone(), Arc::new(()));
    let err = set.call("provision", "main", vec![], run).expect_err("the step fails");
    let expected = format!("{}:2:5: in step 'create' for VM 'test-0': boom", file(&dir, "lib/steps.rhai"));
    assert_eq!(err.to_string(), expected);
    let lines = observer.lines();
    assert_eq!(lines[0], "start outer Some(\"test-0\")");
    assert_eq!(lines[1], "start create Some(\"test-0\")");
    assert_eq!(lines[2], "end create Some(\"test-0\") Some(\"boom\")");
    assert_eq!(lines[3], "end outer Some(\"test-0\") Some(\"boom\")");
}

#[test]
fn a_caught_step_error_keeps_the_thrown_value_and_print_goes_to_the_observer() {
    let (_dir, set) = load(&[(
        "w.rhai",
        "fn main() {\n  let r = ();\n  try { step(\"s\", || throw #{kind: \"conflict\", message: \"held\"}) }\n  catch (e) { print(`caught ${e.kind}`); r = e.message; }\n  r\n}",
    )]);
    let observer = Arc::new(Recorder::default());
    let run = RunContext::new(observer.clone(), Arc::new(()));
    let out = set.call("w", "main", vec![], run).expect("the error is caught");
    assert_eq!(out.to_string(), "held");
    assert!(observer.lines().contains(&"INFO caught conflict".to_string()), "{:?}", observer.lines());
}

#[test]
fn unknown_scripts_and_functions_list_what_exists() {
    let (_dir, set) = load(&[("provision.rhai", "fn main(vm) { 1 }\nprivate fn helper() { 2 }")]);
    let err = set.call("provison", "main", vec![], RunContext::detached()).expect_err("no such script");
    assert_eq!(err.to_string(), "no workflow named 'provison'; the workflows are: provision");
    let err = set.call("provision", "main", vec![], RunContext::detached()).expect_err("wrong arity");
    assert!(
        err.to_string().ends_with("no public function 'main' taking 0 argument(s); the functions are: main(vm)"),
        "{err}"
    );
    let functions = set.functions("provision").expect("the script exists");
    assert_eq!(functions, [FunctionInfo { name: "main".into(), params: vec!["vm".into()] }]);
}

#[test]
fn hashes_follow_the_content() {
    let (_d1, a) = load(&[("w.rhai", "fn main() { 1 }")]);
    let (_d2, b) = load(&[("w.rhai", "fn main() { 2 }")]);
    let (_d3, c) = load(&[("w.rhai", "fn main() { 1 }")]);
    assert_eq!(a.scripts()[0].hash.len(), 64);
    assert_ne!(a.scripts()[0].hash, b.scripts()[0].hash);
    assert_ne!(a.hash(), b.hash());
    assert_eq!(a.hash(), c.hash());
}

/// A host module whose `whoami(key)` returns the run's host data and the key.
fn whoami_module() -> rhai::Shared<Module> {
    let mut module = Module::new();
    module.set_native_fn("acquire", |ctx: NativeCallContext, key: &str| {
        let run = run_context(&ctx).ok_or("no run context")?;
        let who = run.data::<String>().cloned().unwrap_or_default();
        Ok(format!("{who}:{key}"))
    });
    module.into()
}

#[test]
fn concurrent_runs_on_one_set_each_see_their_own_context() {
    let opts = EngineOptions { host_modules: vec![("lock".into(), whoami_module())], ..EngineOptions::default() };
    let script = "fn main(n) {\n  let seen = [];\n  for i in 0..n { seen.push(lock::acquire(`k${i}`)); }\n  seen\n}";
    let (_dir, set) = load_with(&[("w.rhai", script)], &opts);
    let set = Arc::new(set.expect("loads"));
    let threads: Vec<_> = ["alpha", "beta"]
        .into_iter()
        .map(|who| {
            let set = set.clone();
            std::thread::spawn(move || {
                let run = RunContext::new(Arc::new(NoopObserver), Arc::new(who.to_string()));
                let out = set.call("w", "main", vec![Dynamic::from_int(200)], run).expect("runs");
                (who, out.into_array().expect("an array"))
            })
        })
        .collect();
    for thread in threads {
        let (who, seen) = thread.join().expect("the thread finishes");
        assert_eq!(seen.len(), 200);
        for (i, value) in seen.iter().enumerate() {
            assert_eq!(value.to_string(), format!("{who}:k{i}"));
        }
    }
}

#[tokio::test]
async fn call_blocking_runs_on_the_blocking_pool() {
    let (_dir, set) = load(&[("w.rhai", "fn main(x) { x + 1 }")]);
    let out =
        call_blocking(Arc::new(set), "w".into(), "main".into(), vec![Dynamic::from_int(1)], RunContext::detached());
    assert_eq!(out.await.expect("runs").as_int(), Ok(2));
}
