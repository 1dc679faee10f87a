//! The Semaphore provider against the Semaphore stand-in (cradle-sim): the
//! template check before any task, the operator-facing refusals, a failed
//! task's output, confirmation, the limit; and the adapter: the policy check
//! before the provider, and no provider configured.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cradle_sim::services::semaphore::{self, ProjectRole, Semaphore as Stand, SemaphoreConfig, TaskOutcome};
use serde_json::json;

use super::{PostProviderConfig, PostProviderKind, Semaphore, TemplateRef};
use crate::caps::context::{CapCtx, Services};
use crate::caps::http::{EndpointAuth, EndpointConfig, Endpoints};
use crate::caps::policy::RunScope;
use crate::contract::ErrorKind;
use crate::contract::bindings::cradle::host::post::Host;
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::secrets::SecretRef;

const T: Duration = Duration::from_secs(30);

/// A stand-in whose tasks end at once (time scale 0), template 1 ending `outcome`.
async fn stand(outcome: TaskOutcome, time_scale: f64) -> Stand {
    let mut cfg = SemaphoreConfig { time_scale, ..SemaphoreConfig::default() };
    cfg.projects[0].templates[0].outcome = outcome;
    semaphore::start(cfg).await.expect("semaphore stand-in")
}

/// The provider `[post.os]` over the endpoint `semaphore` (`auth = "bearer"`, `token`).
fn provider(dir: &std::path::Path, s: &Stand, token: &str, poll_ms: u64) -> Semaphore {
    let secret = dir.join("semaphore.token");
    std::fs::write(&secret, token).expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let endpoint = EndpointConfig {
        url: s.url(),
        token: Some(SecretRef::File(secret)),
        auth: EndpointAuth::Bearer,
        ca_file: None,
        username: None,
    };
    let http = Endpoints::new(&BTreeMap::from([("semaphore".to_string(), endpoint)]));
    let cfg = PostProviderConfig { kind: PostProviderKind::Semaphore, endpoint: "semaphore".into(), poll_ms };
    Semaphore::new("os", &cfg, http).expect("provider")
}

fn tpl(template: u32) -> TemplateRef {
    TemplateRef { project: 1, template }
}

#[tokio::test]
async fn a_template_runs_with_its_extra_vars_as_an_environment_string_and_its_success_is_returned() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = stand(TaskOutcome::Success, 0.0).await;
    let p = provider(dir.path(), &s, s.api_token().expose(), 10);
    let done = p.run(&tpl(1), &json!({"vm_name": "web-0", "vmid": 150}), T).await.expect("run");
    assert_eq!((done.id, done.status.as_str(), done.template_name.as_str()), (1, "success", "configure-vm"));
    let tasks = s.tasks();
    assert_eq!(tasks.len(), 1);
    // `environment` is a JSON-encoded string, which Ansible gets as extra vars.
    assert_eq!(tasks[0].environment, r#"{"vm_name":"web-0","vmid":150}"#, "{tasks:?}");
    let vars = tasks[0].extra_vars.clone().expect("extra vars");
    assert_eq!((&vars["vm_name"], &vars["vmid"]), (&json!("web-0"), &json!(150)), "{vars}");
}

#[tokio::test]
async fn a_template_without_an_environment_is_invalid_before_any_task_is_made() {
    // semaphoreui/semaphore d4a2713 services/tasks/TaskRunner.go:295-308 and
    // TaskPool.go:365-369: such a task is created, set `error`, and the POST is 500.
    let dir = tempfile::tempdir().expect("tmp");
    let s = stand(TaskOutcome::Success, 0.0).await;
    let p = provider(dir.path(), &s, s.api_token().expose(), 10);
    for _ in 0..2 {
        let e = p.run(&tpl(2), &json!({}), T).await.expect_err("no environment");
        assert_eq!(e.kind, ErrorKind::Invalid, "{e:?}");
        assert!(
            e.message.contains("Semaphore template 2 (configure-vm-no-env) of project 1 has no Environment"),
            "{e:?}"
        );
        assert!(e.message.contains("give the template an Environment (an empty one, {}, is enough)"), "{e:?}");
    }
    assert!(s.tasks().is_empty(), "no failed task is left behind: {:?}", s.tasks());
}

#[tokio::test]
async fn a_token_without_can_run_project_tasks_is_told_the_role_it_needs() {
    // semaphoreui/semaphore d4a2713 api/projects/project.go:48-62: 403, empty body.
    let dir = tempfile::tempdir().expect("tmp");
    let s = stand(TaskOutcome::Success, 0.0).await;
    let guest = s.add_user("viewer", &[(1, ProjectRole::Guest)]);
    let p = provider(dir.path(), &s, guest.expose(), 10);
    let e = p.run(&tpl(1), &json!({}), T).await.expect_err("403");
    assert_eq!(e.kind, ErrorKind::Failed, "{e:?}");
    assert!(e.message.contains("HTTP 403") && e.message.contains("may not run tasks in project 1"), "{e:?}");
    assert!(e.message.contains("CanRunProjectTasks") && e.message.contains("task_runner"), "{e:?}");
    assert!(s.tasks().is_empty());
}

#[tokio::test]
async fn an_unknown_template_or_a_project_without_a_role_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = stand(TaskOutcome::Success, 0.0).await;
    let p = provider(dir.path(), &s, s.api_token().expose(), 10);
    let e = p.run(&tpl(9), &json!({}), T).await.expect_err("no template 9");
    assert_eq!(e.kind, ErrorKind::Invalid, "{e:?}");
    assert!(e.message.contains("project 1 has no template 9"), "{e:?}");
    // A user with no role in project 1 gets 404 for the whole project.
    let stranger = s.add_user("stranger", &[]);
    let p = provider(dir.path(), &s, stranger.expose(), 10);
    let e = p.run(&tpl(1), &json!({}), T).await.expect_err("no role");
    assert!(e.message.contains("project 1 has no template 1 (or the API token's user has no role"), "{e:?}");
    assert!(s.tasks().is_empty());
}

#[tokio::test]
async fn a_failed_task_ends_in_an_error_with_the_end_of_its_output() {
    let dir = tempfile::tempdir().expect("tmp");
    let s = stand(TaskOutcome::Fail, 0.0).await;
    let p = provider(dir.path(), &s, s.api_token().expose(), 10);
    let e = p.run(&tpl(1), &json!({}), T).await.expect_err("fails");
    assert_eq!(e.kind, ErrorKind::Failed, "{e:?}");
    assert!(e.message.starts_with("Semaphore task 1 (template 1 (configure-vm)) ended error: ["), "{e:?}");
    assert!(e.message.contains("PLAY RECAP"), "the output's end: {e:?}");
}

#[tokio::test]
async fn a_task_waiting_for_confirmation_fails_at_once_and_is_not_retried() {
    // semaphoreui/semaphore d4a2713 db_lib/TerraformApp.go:162: the task waits for
    // an operator's confirm, however long it is polled.
    let dir = tempfile::tempdir().expect("tmp");
    let s = stand(TaskOutcome::AwaitConfirmation, 0.0).await;
    let p = provider(dir.path(), &s, s.api_token().expose(), 10);
    let e = p.run(&tpl(1), &json!({}), T).await.expect_err("waits");
    assert_eq!(e.kind, ErrorKind::Failed, "{e:?}");
    assert!(
        e.message.contains("Semaphore task 1 (template 1 (configure-vm), project 1) is waiting_confirmation"),
        "{e:?}"
    );
    assert!(e.message.contains("/api/project/1/tasks/1/confirm"), "{e:?}");
    assert_eq!(s.tasks().len(), 1, "one task, not a new one");
}

#[tokio::test]
async fn a_task_still_running_at_the_limit_is_transient_after_polling_at_the_configured_interval() {
    let dir = tempfile::tempdir().expect("tmp");
    // Time scale 100: the task runs for over 1000 s.
    let s = stand(TaskOutcome::Success, 100.0).await;
    let p = provider(dir.path(), &s, s.api_token().expose(), 50);
    let e = p.run(&tpl(1), &json!({}), Duration::from_millis(300)).await.expect_err("still running");
    assert_eq!(e.kind, ErrorKind::Transient, "{e:?}");
    assert!(e.message.contains("Semaphore task 1 (template 1 (configure-vm)) still waiting after 300 ms"), "{e:?}");
}

fn ctx(dir: &std::path::Path, rt: &tokio::runtime::Runtime, post: Option<Semaphore>) -> CapCtx {
    let grants = toml::from_str("[post]\nprojects = [1]\ntemplates = [1]").expect("grants");
    let services = Services { post: post.map(Arc::new), ..Services::for_tests(dir, rt) };
    CapCtx::for_tests(grants, RunScope::default(), services, "post-test")
}

#[test]
fn the_adapter_denies_a_template_not_granted_before_semaphore_is_asked() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let dir = tempfile::tempdir().expect("tmp");
    let s = rt.block_on(stand(TaskOutcome::Success, 0.0));
    let mut c = ctx(dir.path(), &rt, Some(provider(dir.path(), &s, s.api_token().expose(), 10)));
    match Host::run(&mut c, tpl(2), "{}".into(), 10_000) {
        Err(WitError::Denied(m)) => assert!(m.contains("template 2 (project 1) is not in"), "{m}"),
        other => panic!("expected denied, got {other:?}"),
    }
    match Host::run(&mut c, TemplateRef { project: 3, template: 1 }, "{}".into(), 10_000) {
        Err(WitError::Denied(m)) => assert!(m.contains("project 3 is not in"), "{m}"),
        other => panic!("expected denied, got {other:?}"),
    }
    assert!(s.tasks().is_empty());
    let done = Host::run(&mut c, tpl(1), "{\"vm_name\":\"web-0\"}".into(), 10_000).expect("granted");
    assert_eq!(done.status, "success");
}

#[test]
fn without_a_provider_an_allowed_call_fails_saying_what_to_configure() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let dir = tempfile::tempdir().expect("tmp");
    let mut c = ctx(dir.path(), &rt, None);
    match Host::run(&mut c, tpl(1), "{}".into(), 10_000) {
        Err(WitError::Failed(m)) => assert!(m.contains("post = \"NAME\"") && m.contains("[post.NAME]"), "{m}"),
        other => panic!("expected failed, got {other:?}"),
    }
}

#[test]
fn a_post_provider_or_environment_naming_what_is_not_defined_is_refused_at_load() {
    let text = r#"
[clusters.lab]
kind = "sim"
[environments.test]
cluster = "lab"
backend = "sample"
post = "os"
[plugins.sample]
path = "sample.wasm"
[endpoints.semaphore]
url = "https://127.0.0.1:3000"
auth = "bearer"
token = { file = "/etc/cradle/semaphore.token" }
[post.os]
kind = "semaphore"
endpoint = "semaphore"
"#;
    let load = |t: &str| crate::config::fixture::parse(t).map_err(|e| e.to_string());
    let c = load(text).expect("valid");
    assert_eq!((c.post["os"].poll_ms, c.environments["test"].post.as_deref()), (2000, Some("os")));
    let e = load(&text.replace("endpoint = \"semaphore\"", "endpoint = \"tasks\"")).expect_err("endpoint");
    assert!(e.contains("post.os: endpoint = \"tasks\" is not defined in [endpoints]"), "{e}");
    let e = load(&text.replace("post = \"os\"", "post = \"cfg\"")).expect_err("environment");
    assert!(e.contains("environments.test.post = \"cfg\" is not defined in [post]"), "{e}");
    let e = load(&format!("{text}poll_ms = 0\n")).expect_err("poll");
    assert!(e.contains("post.os: poll_ms = 0 is outside"), "{e}");
}

#[test]
fn workflows_run_a_template_through_post_task_and_a_bad_id_is_invalid_before_semaphore_is_asked() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    let state = tempfile::tempdir().expect("tmp");
    let s = rt.block_on(stand(TaskOutcome::Success, 0.0));
    let dir = state.path().join("workflows");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("os.rhai"),
        "fn main(template) {\n    let t = post_task::run(1, template, #{ vm_name: \"web-0\", vmid: 150 }, 10000);\n    \
         `${t.id} ${t.status} ${t.template_name}`\n}\n",
    )
    .expect("script");
    let opts = crate::workflow::EngineOptions { host_modules: crate::caps::script::modules(), ..Default::default() };
    let set = crate::workflow::WorkflowSet::load(&dir, &opts).expect("load");
    let provider = provider(state.path(), &s, s.api_token().expose(), 10);
    let data = crate::caps::run::RunData {
        run: Arc::new(crate::caps::context::RunHandle::new("post-wf".into(), None)),
        services: Arc::new(Services { post: Some(Arc::new(provider)), ..Services::for_tests(state.path(), &rt) }),
        workflow_grants: Arc::new(toml::from_str("[post]\nprojects = [1]\ntemplates = [1]").expect("grants")),
        scope: Arc::new(RunScope::default()),
        backend: None,
        backend_grants: None,
        plugins: Default::default(),
        environment: "test".into(),
    };
    let data = Arc::new(data);
    let call = |template: i64| {
        let run = crate::workflow::RunContext::new(Arc::new(crate::workflow::NoopObserver), data.clone());
        set.call("os", "main", vec![template.into()], run)
    };
    assert_eq!(call(1).expect("run").to_string(), "1 success configure-vm");
    assert_eq!(s.tasks()[0].environment, r#"{"vm_name":"web-0","vmid":150}"#);
    let e = call(0).expect_err("template 0");
    assert!(format!("{e:?}").contains("template must be a Semaphore id"), "{e:?}");
    assert_eq!(s.tasks().len(), 1, "no task for a bad id");
}
