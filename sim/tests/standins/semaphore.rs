//! Semaphore UI stand-in: bearer/cookie auth with empty 401s, tokens, tasks with a
//! JSON-string environment, statuses, output, stop, and v2.10.32's extra-vars merge.

use cradle_sim::services::Secret;
use cradle_sim::services::semaphore::{self, SemaphoreConfig, TaskOutcome, TaskTimings, TemplateSpec};
use serde_json::{Value, json};

use crate::{client, set_cookie};

fn config(time_scale: f64) -> SemaphoreConfig {
    let mut cfg = SemaphoreConfig { password: Some(Secret::new("pw")), time_scale, ..SemaphoreConfig::default() };
    cfg.projects[0].templates[0].environment = r#"{"role":"db"}"#.into();
    cfg.projects[0].templates.truncate(1);
    let mut failing = TemplateSpec::new(2, "broken", "broken.yml");
    failing.outcome = TaskOutcome::Fail;
    cfg.projects[0].templates.push(failing);
    cfg
}

struct Sem {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Sem {
    async fn send(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(m, format!("{}{path}", self.url)).bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn json(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (s, text) = self.send(method, path, body).await;
        (s, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[tokio::test]
async fn auth_is_a_bearer_token_or_the_session_cookie_and_401s_are_empty() {
    let s = semaphore::start(config(0.0)).await.unwrap();
    let debug = format!("{s:?}");
    assert!(!debug.contains(s.api_token().expose()) && !debug.contains(s.password().expose()), "{debug}");
    let http = client(s.ca_pem());
    let pong = http.get(format!("{}/api/ping", s.url())).send().await.unwrap();
    assert_eq!((pong.status().as_u16(), pong.text().await.unwrap()), (200, "pong".to_string()));
    for auth in [None, Some("Bearer nope"), Some("Basic YWRtaW46cHc=")] {
        let mut req = http.get(format!("{}/api/project/1/tasks/last", s.url()));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        assert_eq!(resp.text().await.unwrap(), "", "401 has an empty body");
    }
    let login = |auth: &str, pw: &str| {
        http.post(format!("{}/api/auth/login", s.url())).json(&json!({"auth": auth, "password": pw}))
    };
    assert_eq!(login("admin", "no").send().await.unwrap().status().as_u16(), 401);
    let resp = http.post(format!("{}/api/auth/login", s.url())).body("{").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let resp = login("ADMIN@localhost", "pw").send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 204, "login by e-mail, any case");
    let cookie = format!("semaphore={}", set_cookie(&resp, "semaphore").expect("session cookie"));

    let resp = http.post(format!("{}/api/user/tokens", s.url())).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let token: Value = resp.json().await.unwrap();
    assert_eq!((token["expired"].as_bool(), token["user_id"].as_u64()), (Some(false), Some(1)));
    let id = token["id"].as_str().unwrap().to_string();
    assert_eq!(id, id.to_lowercase());
    // The header is lower-cased before the lookup: any case of `Bearer` works.
    let resp = http
        .get(format!("{}/api/project/1/tasks/last", s.url()))
        .header("authorization", format!("BEARER {id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = http.delete(format!("{}/api/user/tokens/{id}", s.url())).bearer_auth(&id).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let resp = http.get(format!("{}/api/project/1/tasks/last", s.url())).bearer_auth(&id).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401, "a revoked token");
}

#[tokio::test]
async fn a_task_takes_a_json_string_environment_and_the_template_keys_win() {
    let s = semaphore::start(config(0.0)).await.unwrap();
    let sem = Sem { http: client(s.ca_pem()), url: s.url(), token: s.api_token().expose().to_string() };
    let object_env = r#"{"template_id": 1, "environment": {"vm_name": "vm01"}}"#;
    let (code, text) = sem.send("POST", "/api/project/1/tasks", Some(object_env)).await;
    assert_eq!((code, text.as_str()), (400, ""), "an object is not a string: Go's decoder refuses it");
    assert!(s.tasks().is_empty());

    let env = json!({"vm_name": "vm01", "ip": "192.0.2.10", "role": "web"}).to_string();
    let body = json!({"template_id": 1, "environment": env, "limit": "vm01", "message": "provision vm01"}).to_string();
    let (code, task) = sem.json("POST", "/api/project/1/tasks", Some(&body)).await;
    assert_eq!(code, 201);
    assert_eq!((task["status"].as_str(), task["environment"].as_str()), (Some("waiting"), Some(env.as_str())));
    assert_eq!(
        (task["template_id"].as_u64(), task["project_id"].as_u64(), task["start"].clone()),
        (Some(1), Some(1), Value::Null)
    );
    let tid = task["id"].as_u64().unwrap();

    // time_scale 0: the task has already run.
    let (code, now) = sem.json("GET", &format!("/api/project/1/tasks/{tid}"), None).await;
    assert_eq!((code, now["status"].as_str()), (200, Some("success")));
    assert!(now["start"].is_string() && now["end"].is_string());
    let (_, out) = sem.json("GET", &format!("/api/project/1/tasks/{tid}/output"), None).await;
    let first = &out[0];
    assert_eq!((first["task_id"].as_u64(), first["output"].as_str()), (Some(tid), Some("Task 1 added to queue")));
    assert!(first["time"].is_string() && first["task"].is_string());
    assert!(out.as_array().unwrap().iter().any(|l| l["output"].as_str().is_some_and(|o| o.starts_with("PLAY RECAP"))));

    // The extra vars Ansible got: the template's `role` overrides the task's.
    let t = s.task(1, u32::try_from(tid).unwrap()).unwrap();
    let vars = t.extra_vars.unwrap();
    assert_eq!((vars["ip"].as_str(), vars["role"].as_str()), (Some("192.0.2.10"), Some("db")));
    assert_eq!(vars["semaphore_vars"]["task_details"]["message"], "provision vm01");

    let (code, last) = sem.json("GET", "/api/project/1/tasks/last", None).await;
    assert_eq!((code, last[0]["id"].as_u64(), last[0]["tpl_alias"].as_str()), (200, Some(tid), Some("configure-vm")));
}

#[tokio::test]
async fn failing_templates_bad_input_and_unknown_ids_answer_as_v2_10_32() {
    let s = semaphore::start(config(0.0)).await.unwrap();
    let sem = Sem { http: client(s.ca_pem()), url: s.url(), token: s.api_token().expose().to_string() };
    let (code, t) = sem.json("POST", "/api/project/1/tasks", Some(r#"{"template_id": 2}"#)).await;
    assert_eq!(code, 201);
    let (_, t) = sem.json("GET", &format!("/api/project/1/tasks/{}", t["id"]), None).await;
    assert_eq!(t["status"], "error");
    assert!(s.set_template_outcome(1, 2, TaskOutcome::Success));
    let (_, t) = sem.json("POST", "/api/project/1/tasks", Some(r#"{"template_id": 2}"#)).await;
    let (_, t) = sem.json("GET", &format!("/api/project/1/tasks/{}", t["id"]), None).await;
    assert_eq!(t["status"], "success");

    // A task whose environment string is not JSON is created `error`, answered 500.
    let (code, text) =
        sem.send("POST", "/api/project/1/tasks", Some(r#"{"template_id": 1, "environment": "{nope"}"#)).await;
    assert_eq!((code, text.as_str()), (500, ""));
    let broken = s.tasks().pop().unwrap();
    assert_eq!((broken.status.as_str(), broken.extra_vars), ("error", None));

    assert_eq!(sem.send("POST", "/api/project/1/tasks", Some(r#"{"template_id": 99}"#)).await.0, 500);
    assert_eq!(sem.send("GET", "/api/project/1/tasks/999", None).await.0, 400);
    assert_eq!(sem.send("GET", "/api/project/7/tasks/last", None).await.0, 404);
    let (code, v) = sem.json("GET", "/api/project/x/tasks/last", None).await;
    assert_eq!((code, v), (400, json!({"error": "Invalid project ID"})));
}

#[tokio::test]
async fn a_long_task_waits_until_stopped_and_a_stop_needs_a_json_body() {
    let mut cfg = config(1.0);
    let hour = std::time::Duration::from_secs(3600);
    cfg.timings = TaskTimings { waiting: hour, starting: hour, running: hour, stopping: hour };
    let s = semaphore::start(cfg).await.unwrap();
    let sem = Sem { http: client(s.ca_pem()), url: s.url(), token: s.api_token().expose().to_string() };
    let (_, t) = sem.json("POST", "/api/project/1/tasks", Some(r#"{"template_id": 1}"#)).await;
    let path = format!("/api/project/1/tasks/{}", t["id"]);
    assert_eq!(sem.json("GET", &path, None).await.1["status"], "waiting");
    assert_eq!(sem.send("POST", &format!("{path}/stop"), None).await.0, 400, "Go's decoder: an empty body is EOF");
    assert_eq!(sem.send("POST", &format!("{path}/stop"), Some("{}")).await.0, 204);
    assert_eq!(sem.json("GET", &path, None).await.1["status"], "stopping");
    assert_eq!(sem.send("POST", &format!("{path}/stop"), Some(r#"{"force": true}"#)).await.0, 204);
    let t = sem.json("GET", &path, None).await.1;
    assert_eq!((t["status"].as_str(), t["end"].is_string()), (Some("stopped"), true));
}
