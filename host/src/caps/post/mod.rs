//! The `post` capability: the post-provision stage's task runner. Its
//! provider runs a Semaphore UI task template with extra variables and waits
//! for the task to end (workflows/lib/post.rhai's `semaphore` driver, the
//! NetBox pipeline's `os-config` step).
//!
//! Contract (the calls of Semaphore v2.10; facts in docs/STAND-INS.md,
//! "Semaphore UI"):
//! - [`Semaphore::run`] first reads the template (`GET
//!   /api/project/{p}/templates/{t}`): a template without an Environment
//!   (`environment_id` null) is `invalid` before any task is made, since
//!   Semaphore 2.10 creates every task sent with extra vars on it, fails it
//!   and answers 500 with an empty body (services/tasks/TaskRunner.go
//!   populateDetails), so each rerun would add another failed task; a 404
//!   there is `invalid` (no such template).
//! - It then starts the task (`POST /api/project/{p}/tasks` with
//!   `template_id` and `environment`, the extra vars as a JSON-encoded
//!   string, not an object) and polls `GET .../tasks/{id}` every
//!   `[post.NAME] poll_ms` until the task ends or the call's limit passes.
//! - What needs an operator is said as such and never retried as transient:
//!   a 500 on start (the extra vars could not be built), 403 (the token's
//!   user has no role with CanRunProjectTasks in the project), 404 (no such
//!   project, or no role in it), a task ending `error` or `stopped` (the last
//!   five lines of its output in the message), `waiting_confirmation` (the
//!   task waits for someone to confirm or stop it, which no polling
//!   changes). A 401 is `denied`; only a task still running at the limit is
//!   `transient`.
//! - Semaphore merges the template's own Environment over the task's, so the
//!   template's Environment must not hold the keys passed here.
//! - The server is reached through the named endpoint of
//!   `[post.NAME].endpoint` ([`super::http::Endpoints`]): the host attaches
//!   the bearer token; no credential reaches the caller.
//!
//! The grant is [`scope`].

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{Endpoints, json_request};
use crate::contract::bindings::cradle::host::http::Method;
use crate::contract::{CapError, ErrorKind};

pub use self::config::{PostProviderConfig, PostProviderKind};
pub use crate::contract::bindings::cradle::host::post::{TaskOutcome, TemplateRef};

mod config;
mod host;
pub(crate) mod rhai;
pub mod scope;

#[cfg(test)]
mod tests;

/// How long one request to the server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How many lines of a failed task's output its error carries.
const OUTPUT_TAIL: usize = 5;

/// A Semaphore UI server, reached through a named endpoint.
#[derive(Debug, Clone)]
pub struct Semaphore {
    section: String,
    endpoint: String,
    poll: Duration,
    http: Endpoints,
}

/// One answer: its status, its body as text and as JSON (`null` when it is none).
struct Answer {
    status: u16,
    text: String,
    json: Value,
}

impl Semaphore {
    /// The provider `[post.<name>]`, sending through `http` (the
    /// environment's endpoints).
    pub fn new(name: &str, cfg: &PostProviderConfig, http: Endpoints) -> Result<Semaphore, CapError> {
        let section = format!("post.{name}");
        cfg.validate().map_err(|m| CapError::invalid(format!("{section}: {m}")))?;
        Ok(Semaphore { section, endpoint: cfg.endpoint.clone(), poll: Duration::from_millis(cfg.poll_ms), http })
    }

    /// Run `template` with `vars` (a JSON object: the task's extra vars) and
    /// wait for its task to end, at most `limit`.
    pub async fn run(&self, template: &TemplateRef, vars: &Value, limit: Duration) -> Result<TaskOutcome, CapError> {
        let (project, tid) = (template.project, template.template);
        if !vars.is_object() {
            return Err(CapError::invalid("post: extra vars must be a JSON object"));
        }
        let tpl_name = self.template_for_vars(project, tid).await?;
        let name = format!("template {tid} ({tpl_name})");
        // `environment` is a JSON-encoded string, not an object.
        let body = json!({ "template_id": tid, "environment": vars.to_string() });
        let r = self.send(Method::Post, &format!("/api/project/{project}/tasks"), Some(body)).await?;
        if r.status == 500 {
            let said = if r.text.is_empty() { "with an empty answer".to_string() } else { r.text.clone() };
            return Err(CapError::failed(format!(
                "Semaphore refused to start {name} of project {project}: HTTP 500 {said}; Semaphore answers so when it cannot build the task's extra vars from the task's 'environment' and the template's Environment (not valid JSON, or none): the failed task is in the project's task list with Semaphore's error; fix the template's Environment"
            )));
        }
        let task = judge(r, &format!("starting {name}"), project)?;
        let Some(id) = task["id"].as_u64().and_then(|id| u32::try_from(id).ok()) else {
            return Err(CapError::failed(format!(
                "Semaphore: starting {name} of project {project}: the answer has no task id ({})",
                self.section
            )));
        };
        tracing::info!(provider = %self.section, project, template = tid, task = id, "semaphore task started");
        let path = format!("/api/project/{project}/tasks/{id}");
        let started = Instant::now();
        loop {
            let now = judge(self.send(Method::Get, &path, None).await?, &format!("task {id}"), project)?;
            let status = now["status"].as_str().unwrap_or_default().to_string();
            match status.as_str() {
                "success" => return Ok(TaskOutcome { id, status, template_name: tpl_name }),
                "error" | "stopped" => {
                    let out = self.send(Method::Get, &format!("{path}/output"), None).await?;
                    let lines = judge(out, &format!("output of task {id}"), project)?;
                    let all: Vec<String> = lines
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|l| l["output"].as_str().unwrap_or_default().to_string())
                        .collect();
                    let tail = &all[all.len().saturating_sub(OUTPUT_TAIL)..];
                    return Err(CapError::failed(format!("Semaphore task {id} ({name}) ended {status}: {tail:?}")));
                }
                "waiting_confirmation" => {
                    return Err(CapError::failed(format!(
                        "Semaphore task {id} ({name}, project {project}) is waiting_confirmation: it waits for an operator; confirm it in Semaphore (or POST {path}/confirm) and let it finish, or stop it, then run cradle again; a template that asks for confirmation cannot run unattended"
                    )));
                }
                _ => {}
            }
            if started.elapsed() >= limit {
                return Err(CapError::new(
                    ErrorKind::Transient,
                    format!("Semaphore task {id} ({name}) still {status} after {} ms", limit.as_millis()),
                ));
            }
            tokio::time::sleep(self.poll.min(limit.saturating_sub(started.elapsed()))).await;
        }
    }

    /// The template's name, checked to take extra vars: one without an
    /// Environment (`environment_id` null) fails every task started with them.
    async fn template_for_vars(&self, project: u32, template: u32) -> Result<String, CapError> {
        let r = self.send(Method::Get, &format!("/api/project/{project}/templates/{template}"), None).await?;
        if r.status == 404 {
            return Err(CapError::invalid(format!(
                "Semaphore: project {project} has no template {template} (or the API token's user has no role in the project); fix the template id"
            )));
        }
        let tpl = judge(r, &format!("template {template}"), project)?;
        let name = tpl["name"].as_str().unwrap_or("unnamed").to_string();
        if tpl["environment_id"].is_null() {
            return Err(CapError::invalid(format!(
                "Semaphore template {template} ({name}) of project {project} has no Environment: Semaphore fails every task started on it with extra vars (the task's 'environment' field) with HTTP 500 and an empty answer; give the template an Environment (an empty one, {{}}, is enough)"
            )));
        }
        Ok(name)
    }

    /// One request to the server.
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Result<Answer, CapError> {
        let req = json_request(&self.endpoint, method, path.to_string(), Vec::new(), body.as_ref(), false);
        let resp = self.http.send_for(&self.section, req, REQUEST_TIMEOUT).await?;
        let text = String::from_utf8_lossy(&resp.body).into_owned();
        Ok(Answer { status: resp.status, json: serde_json::from_str(&text).unwrap_or(Value::Null), text })
    }
}

/// The answer's JSON, or the error its status says, naming what the
/// operator must do for a 403 or a 404.
fn judge(r: Answer, what: &str, project: u32) -> Result<Value, CapError> {
    match r.status {
        403 => Err(CapError::failed(format!(
            "Semaphore: {what}: HTTP 403: the API token's user may not run tasks in project {project}; give it a role with CanRunProjectTasks there (task_runner, manager or owner), or use a token of a user who has one"
        ))),
        404 => Err(CapError::failed(format!(
            "Semaphore: {what}: HTTP 404: project {project} does not exist or the API token's user has no role in it"
        ))),
        200..=299 => Ok(r.json),
        status => {
            let kind = if status == 401 { ErrorKind::Denied } else { ErrorKind::Failed };
            Err(CapError::new(kind, format!("Semaphore: {what}: HTTP {status}: {}", r.text)))
        }
    }
}
