//! Semaphore UI stand-in: what v2.10.32 refuses or holds that a plain run never
//! meets — a task with extra vars on a template without an Environment, a user
//! without `CanRunProjectTasks`, a task waiting for confirmation.
//!
//! Source: `semaphoreui/semaphore` d4a27137486d65f963257d06e6b7867b54513e20 (v2.10.32).

use cradle_sim::services::semaphore::{self, ProjectRole, SemaphoreConfig, TaskOutcome, TemplateSpec};
use serde_json::Value;

use crate::client;

/// `method path` with `token` and a JSON body; returns (status, body text).
async fn send(url: &str, token: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let http = client(None);
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = http.request(m, format!("{url}{path}")).bearer_auth(token);
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

const WITH_VARS: &str = r#"{"template_id": 2, "environment": "{\"vm_name\":\"vm01\"}"}"#;

#[tokio::test]
async fn a_task_with_an_environment_on_the_default_template_without_one_is_made_error_and_answered_500_empty() {
    // services/tasks/TaskRunner.go:295-308: with a task `environment`, the template's
    // Environment JSON ("" without an Environment) is unmarshalled and fails;
    // TaskPool.go:365-369 logs `Error: ...` and sets the task `error`;
    // api/projects/tasks.go:30-35 answers 500 with no body.
    let s = semaphore::start(SemaphoreConfig { time_scale: 0.0, ..SemaphoreConfig::default() }).await.unwrap();
    let token = s.api_token().expose().to_string();
    let (status, tpl) = send(&s.url(), &token, "GET", "/api/project/1/templates/2", None).await;
    let tpl: Value = serde_json::from_str(&tpl).unwrap();
    assert_eq!(
        (status, tpl["name"].as_str(), &tpl["environment_id"]),
        (200, Some("configure-vm-no-env"), &Value::Null)
    );
    let (status, body) = send(&s.url(), &token, "POST", "/api/project/1/tasks", Some(WITH_VARS)).await;
    assert_eq!((status, body.as_str()), (500, ""));
    let task = s.task(1, 1).expect("the task was created");
    assert_eq!((task.status.as_str(), task.extra_vars), ("error", None));
    let (_, out) = send(&s.url(), &token, "GET", "/api/project/1/tasks/1/output", None).await;
    assert!(out.contains("Error: unexpected end of JSON input"), "{out}");
    // Without extra vars the same template runs (the Environment is not read).
    let (status, _) = send(&s.url(), &token, "POST", "/api/project/1/tasks", Some(r#"{"template_id": 2}"#)).await;
    assert_eq!(status, 201);
    // The template with an Environment (`{}`) names it.
    let (_, tpl) = send(&s.url(), &token, "GET", "/api/project/1/templates/1", None).await;
    assert!(serde_json::from_str::<Value>(&tpl).unwrap()["environment_id"].is_number(), "{tpl}");
}

#[tokio::test]
async fn a_user_without_can_run_project_tasks_gets_403_and_a_project_without_a_role_404() {
    // db/ProjectUser.go:22-27 (guest: no CanRunProjectTasks); api/router.go:175-181 and
    // api/projects/project.go:48-62 (403, empty, on non-GET calls); project.go:27-31
    // (no role in the project: GetProjectUser's ErrNotFound, 404).
    let mut cfg = SemaphoreConfig { time_scale: 0.0, ..SemaphoreConfig::default() };
    cfg.projects.push(semaphore::ProjectSpec {
        id: 2,
        name: "other".into(),
        templates: vec![TemplateSpec::new(1, "x", "x.yml")],
    });
    let s = semaphore::start(cfg).await.unwrap();
    let guest = s.add_user("viewer", &[(1, ProjectRole::Guest)]);
    let runner = s.add_user("runner", &[(1, ProjectRole::TaskRunner)]);
    let body = Some(r#"{"template_id": 1}"#);
    let (status, text) = send(&s.url(), guest.expose(), "POST", "/api/project/1/tasks", body).await;
    assert_eq!((status, text.as_str()), (403, ""));
    assert!(s.tasks().is_empty(), "no task was made");
    assert_eq!(
        send(&s.url(), guest.expose(), "GET", "/api/project/1/tasks/last", None).await.0,
        200,
        "reading is allowed"
    );
    assert_eq!(send(&s.url(), guest.expose(), "GET", "/api/project/2/tasks/last", None).await.0, 404);
    let (status, made) = send(&s.url(), runner.expose(), "POST", "/api/project/1/tasks", body).await;
    assert_eq!(status, 201, "{made}");
    assert_eq!(serde_json::from_str::<Value>(&made).unwrap()["user_id"], 3, "the runner's own id (admin 1, viewer 2)");
    let stop = Some(r#"{"force": true}"#);
    assert_eq!(send(&s.url(), guest.expose(), "POST", "/api/project/1/tasks/1/stop", stop).await.0, 403);
    assert_eq!(send(&s.url(), runner.expose(), "POST", "/api/project/2/tasks", body).await.0, 404);
    let admin = s.api_token().expose().to_string();
    assert_eq!(send(&s.url(), &admin, "POST", "/api/project/2/tasks", body).await.0, 201, "an admin may run anything");
}

#[tokio::test]
async fn a_task_waiting_for_confirmation_stays_so_until_confirmed() {
    // pkg/task_logger/task_logger.go:14 `waiting_confirmation`, not finished (:44);
    // db_lib/TerraformApp.go:162 sets it after the plan and waits for the confirm;
    // api/router.go:181 `POST .../tasks/{id}/confirm` (204).
    let mut cfg = SemaphoreConfig { time_scale: 0.0, ..SemaphoreConfig::default() };
    cfg.projects[0].templates[0].outcome = TaskOutcome::AwaitConfirmation;
    let s = semaphore::start(cfg).await.unwrap();
    let token = s.api_token().expose().to_string();
    assert_eq!(send(&s.url(), &token, "POST", "/api/project/1/tasks", Some(r#"{"template_id": 1}"#)).await.0, 201);
    for _ in 0..2 {
        let (_, t) = send(&s.url(), &token, "GET", "/api/project/1/tasks/1", None).await;
        assert_eq!(serde_json::from_str::<Value>(&t).unwrap()["status"], "waiting_confirmation");
    }
    assert_eq!(send(&s.url(), &token, "POST", "/api/project/1/tasks/1/confirm", None).await.0, 204);
    assert_eq!(s.task(1, 1).unwrap().status, "success");
}
