//! Semaphore's tasks: what `POST /api/project/{pid}/tasks` accepts (Go's
//! `encoding/json` into `db.Task`), how the template's Environment and the task's
//! `environment` become Ansible's extra vars (v2.10.32 `TaskRunner.populateDetails`,
//! `LocalJob.getEnvironmentExtraVars`), and how a task's status moves over time.
//!
//! Contract: [`decode`] rejects what Go's decoder rejects (not an object, a field of
//! the wrong JSON type — an `environment` object included — or no body) and matches
//! field names case-insensitively as Go does. [`extra_vars`] merges as v2.10.32: the
//! task's string only counts when the template's Environment JSON is non-empty, and
//! the template's keys override the task's; a bad JSON string fails the task at
//! creation. A task's status is computed from its creation instant: `waiting`, then
//! `starting`, `running`, then `success` or `error` after the scaled durations; a stop
//! makes an unfinished task `stopping` then `stopped` (at once with `force`); a
//! [`TaskOutcome::AwaitConfirmation`] task stays `waiting_confirmation` after its
//! running time until confirmed, then runs again and succeeds; and —
//! as v2.10.32's `SetStatus` allows — a finished `success`/`error` task `stopped`.

use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::{SemaphoreTask, TaskOutcome};
use crate::services::Stamp;

/// What a client sent, as `db.Task` holds it.
#[derive(Debug, Clone, Default)]
pub(super) struct TaskInput {
    pub template_id: i64,
    pub debug: bool,
    pub dry_run: bool,
    pub diff: bool,
    pub playbook: String,
    pub environment: String,
    pub limit: String,
    pub secret: String,
    pub arguments: Option<String>,
    pub git_branch: Option<String>,
    pub message: String,
    pub inventory_id: Option<i64>,
}

/// Go's `json.Decoder.Decode` of a request body into `db.Task`; `Err` = 400.
pub(super) fn decode(body: &[u8]) -> Result<TaskInput, ()> {
    let value = serde_json::Deserializer::from_slice(body).into_iter::<Value>().next().ok_or(())?.map_err(|_| ())?;
    let Value::Object(obj) = value else { return Err(()) };
    let mut t = TaskInput::default();
    for (key, v) in &obj {
        let k = key.to_ascii_lowercase();
        let string = |v: &Value| -> Result<Option<String>, ()> {
            match v {
                Value::Null => Ok(None),
                Value::String(s) => Ok(Some(s.clone())),
                _ => Err(()),
            }
        };
        let int = |v: &Value| -> Result<Option<i64>, ()> {
            match v {
                Value::Null => Ok(None),
                Value::Number(n) => n.as_i64().map(Some).ok_or(()),
                _ => Err(()),
            }
        };
        let boolean = |v: &Value| -> Result<Option<bool>, ()> {
            match v {
                Value::Null => Ok(None),
                Value::Bool(b) => Ok(Some(*b)),
                _ => Err(()),
            }
        };
        match k.as_str() {
            "template_id" => t.template_id = int(v)?.unwrap_or(t.template_id),
            "id" | "project_id" | "user_id" | "integration_id" | "schedule_id" | "build_task_id" => {
                int(v)?;
            }
            "inventory_id" => t.inventory_id = int(v)?,
            "debug" => t.debug = boolean(v)?.unwrap_or(false),
            "dry_run" => t.dry_run = boolean(v)?.unwrap_or(false),
            "diff" => t.diff = boolean(v)?.unwrap_or(false),
            "playbook" => t.playbook = string(v)?.unwrap_or_default(),
            "environment" => t.environment = string(v)?.unwrap_or_default(),
            "limit" => t.limit = string(v)?.unwrap_or_default(),
            "secret" => t.secret = string(v)?.unwrap_or_default(),
            "message" => t.message = string(v)?.unwrap_or_default(),
            "arguments" => t.arguments = string(v)?,
            "git_branch" => t.git_branch = string(v)?,
            "status" | "commit_hash" | "commit_message" | "version" => {
                string(v)?;
            }
            "created" | "start" | "end" => {
                if let Some(s) = string(v)? {
                    time::OffsetDateTime::parse(&s, &time::format_description::well_known::Rfc3339).map_err(|_| ())?;
                }
            }
            _ => {}
        }
    }
    Ok(t)
}

/// Go's `json.Unmarshal` of `s` into `map[string]interface{}` (error texts as Go's).
fn go_map(s: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(other) => {
            let kind = match other {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                _ => "bool",
            };
            Err(format!("json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"))
        }
        Err(_) if s.trim().is_empty() => Err("unexpected end of JSON input".into()),
        Err(_) => {
            let c = s.trim_start().chars().next().unwrap_or(' ');
            Err(format!("invalid character '{c}' looking for beginning of value"))
        }
    }
}

/// The extra vars Ansible gets: the merged Environment, the task's `secret` vars,
/// and `semaphore_vars`.
pub(super) fn extra_vars(
    task_env: &str,
    template_env: &str,
    secret: &str,
    task_id: u32,
    username: &str,
    message: &str,
) -> Result<Map<String, Value>, String> {
    let mut env_json = template_env.to_string();
    if !task_env.is_empty() {
        let mut environment = Map::new();
        if !template_env.is_empty() {
            environment = go_map(task_env)?;
        }
        let template = go_map(template_env)?;
        environment.extend(template);
        env_json = Value::Object(environment).to_string();
    }
    let mut vars = if env_json.is_empty() { Map::new() } else { go_map(&env_json)? };
    if !secret.is_empty() {
        vars.extend(go_map(secret)?);
    }
    let mut details = json!({"id": task_id, "username": username, "url": null});
    if !message.is_empty()
        && let Some(d) = details.as_object_mut()
    {
        d.insert("message".into(), json!(message));
    }
    vars.insert("semaphore_vars".into(), json!({"task_details": details}));
    Ok(vars)
}

/// How long each phase takes (already scaled).
#[derive(Debug, Clone, Copy)]
pub(super) struct Phases {
    pub waiting: Duration,
    pub starting: Duration,
    pub running: Duration,
    pub stopping: Duration,
}

/// One task.
#[derive(Debug, Clone)]
pub(super) struct Task {
    pub id: u32,
    pub project_id: u32,
    pub input: TaskInput,
    pub user_id: u32,
    pub created_iso: String,
    pub created_at: Instant,
    pub created: Stamp,
    pub outcome: TaskOutcome,
    pub phases: Phases,
    /// `populateDetails` failed: the task is `error` from the start, with this log.
    pub setup_error: Option<String>,
    pub extra_vars: Option<Map<String, Value>>,
    pub lines: Vec<String>,
    pub template_name: String,
    pub template_playbook: String,
    pub stop: Option<(Instant, bool)>,
    /// When `POST .../confirm` confirmed it (a [`TaskOutcome::AwaitConfirmation`] task).
    pub confirmed: Option<Instant>,
}

/// `time.Time`'s JSON form for an instant relative to the task's creation.
fn iso_after(created_iso: &str, created_at: Instant, at: Instant) -> String {
    let base = time::OffsetDateTime::parse(created_iso, &time::format_description::well_known::Rfc3339)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let t = base + at.saturating_duration_since(created_at);
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// Now in Go's `time.Time` JSON form (RFC 3339 with nanoseconds, UTC).
pub(super) fn now_iso() -> String {
    time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

impl Task {
    fn running_at(&self) -> Instant {
        self.created_at + self.phases.waiting + self.phases.starting
    }

    fn done_at(&self) -> Instant {
        self.running_at() + self.phases.running
    }

    /// (status, start, end) at `now`.
    pub fn status(&self, now: Instant) -> (&'static str, Option<Instant>, Option<Instant>) {
        if self.setup_error.is_some() {
            return ("error", None, Some(self.created_at));
        }
        let (run, done) = (self.running_at(), self.done_at());
        let started = (now >= run).then_some(run);
        let natural = |at: Instant| -> &'static str {
            if at < self.created_at + self.phases.waiting {
                "waiting"
            } else if at < run {
                "starting"
            } else if at < done {
                "running"
            } else {
                match (self.outcome, self.confirmed) {
                    (TaskOutcome::Success, _) => "success",
                    (TaskOutcome::Fail, _) => "error",
                    // The plan is done; the apply waits for an operator
                    // (v2.10.32 db_lib/TerraformApp.go:162), then runs.
                    (TaskOutcome::AwaitConfirmation, Some(c)) if at >= c + self.phases.running => "success",
                    (TaskOutcome::AwaitConfirmation, Some(c)) if at >= c => "running",
                    (TaskOutcome::AwaitConfirmation, _) => "waiting_confirmation",
                }
            }
        };
        if let Some((stop_at, force)) = self.stop
            && now >= stop_at
        {
            let was = natural(stop_at);
            let start = (stop_at >= run).then_some(run);
            if matches!(was, "success" | "error") || force || now >= stop_at + self.phases.stopping {
                let end = if matches!(was, "success" | "error") { self.end_at() } else { stop_at };
                return ("stopped", start, Some(end));
            }
            return ("stopping", start, None);
        }
        let status = natural(now);
        let end = matches!(status, "success" | "error").then_some(self.end_at());
        (status, started, end)
    }

    /// When a finished task ended (a confirmed one: its apply's running time
    /// after the confirmation).
    fn end_at(&self) -> Instant {
        match self.confirmed {
            Some(c) => c + self.phases.running,
            None => self.done_at(),
        }
    }

    /// `POST .../confirm`: only a task waiting for confirmation moves on.
    pub fn confirm(&mut self, now: Instant) -> bool {
        if self.status(now).0 != "waiting_confirmation" {
            return false;
        }
        self.confirmed = Some(now);
        true
    }

    /// The `db.Task` JSON (`secret` as given back by `POST`, else empty).
    pub fn json(&self, now: Instant, secret: &str) -> Value {
        let (status, start, end) = self.status(now);
        let iso = |i: Option<Instant>| i.map(|i| iso_after(&self.created_iso, self.created_at, i));
        json!({
            "id": self.id, "template_id": self.input.template_id, "project_id": self.project_id,
            "status": status, "debug": self.input.debug, "dry_run": self.input.dry_run, "diff": self.input.diff,
            "playbook": self.input.playbook, "environment": self.input.environment, "limit": self.input.limit,
            "secret": secret, "arguments": self.input.arguments, "git_branch": self.input.git_branch,
            "user_id": self.user_id, "integration_id": null, "schedule_id": null,
            "created": self.created_iso, "start": iso(start), "end": iso(end),
            "message": self.input.message, "commit_hash": null, "commit_message": "", "build_task_id": null,
            "version": null, "inventory_id": self.input.inventory_id,
        })
    }

    /// The task as `POST` answers it: just created, `waiting`, `secret` `{}`.
    pub fn created_json(&self) -> Value {
        let mut v = self.json(self.created_at, "{}");
        if let Some(o) = v.as_object_mut() {
            o.insert("status".into(), json!("waiting"));
            o.insert("start".into(), Value::Null);
            o.insert("end".into(), Value::Null);
        }
        v
    }

    /// The `TaskWithTpl` JSON of `tasks/last`.
    pub fn json_with_template(&self, now: Instant, user_name: &str) -> Value {
        let mut v = self.json(now, "");
        if let Some(o) = v.as_object_mut() {
            o.insert("tpl_playbook".into(), json!(self.template_playbook));
            o.insert("tpl_alias".into(), json!(self.template_name));
            o.insert("tpl_type".into(), json!(""));
            o.insert("tpl_app".into(), json!("ansible"));
            o.insert("user_name".into(), json!(user_name));
            o.insert("build_task".into(), Value::Null);
        }
        v
    }

    /// The output lines visible at `now`, with the instant each was written.
    pub fn output(&self, now: Instant) -> Vec<(Instant, String)> {
        let mut out = vec![(self.created_at, format!("Task {} added to queue", self.id))];
        if let Some(e) = &self.setup_error {
            out.push((self.created_at, format!("Error: {e}")));
            return out;
        }
        let cut = match self.stop {
            Some((at, _)) if at < now => at,
            _ => now,
        };
        let start = self.created_at + self.phases.waiting;
        if cut >= start {
            out.push((start, format!("Started: {}", self.id)));
            out.push((start, format!("Run TaskRunner with template: {}", self.template_name)));
        }
        let run = self.running_at();
        let n = u32::try_from(self.lines.len()).unwrap_or(u32::MAX).max(1);
        for (i, line) in self.lines.iter().enumerate() {
            let at = run + self.phases.running.mul_f64(f64::from(u32::try_from(i).unwrap_or(0)) / f64::from(n));
            if cut >= at && cut >= run {
                out.push((at, line.clone()));
            }
        }
        out
    }

    pub fn public(&self, now: Instant) -> SemaphoreTask {
        SemaphoreTask {
            id: self.id,
            project_id: self.project_id,
            template_id: self.input.template_id,
            status: self.status(now).0.to_string(),
            environment: self.input.environment.clone(),
            extra_vars: self.extra_vars.clone().map(Value::Object),
            limit: self.input.limit.clone(),
            message: self.input.message.clone(),
            arguments: self.input.arguments.clone(),
            created: self.created,
        }
    }

    /// `iso_after` for an output line.
    pub fn line_time(&self, at: Instant) -> String {
        iso_after(&self.created_iso, self.created_at, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_decoding_rejects_an_environment_object_and_wrong_types() {
        assert!(decode(br#"{"template_id": 1, "environment": "{\"vm\":\"vm01\"}"}"#).is_ok());
        assert!(decode(br#"{"template_id": 1, "environment": {"vm": "vm01"}}"#).is_err());
        assert!(decode(br#"{"template_id": "1"}"#).is_err());
        assert!(decode(br#"{"template_id": 1, "arguments": ["--x"]}"#).is_err());
        assert!(decode(b"").is_err() && decode(b"[]").is_err());
        let t = decode(br#"{"Template_ID": 2, "Limit": "vm01", "unknown": {}} trailing"#).unwrap();
        assert_eq!((t.template_id, t.limit.as_str()), (2, "vm01"));
    }

    #[test]
    fn the_template_environment_overrides_the_task_keys() {
        let v = extra_vars(r#"{"ip":"192.0.2.10","role":"web"}"#, r#"{"role":"db"}"#, r#"{"pw":"s"}"#, 7, "admin", "")
            .unwrap();
        assert_eq!(
            (v["ip"].as_str(), v["role"].as_str(), v["pw"].as_str()),
            (Some("192.0.2.10"), Some("db"), Some("s"))
        );
        assert_eq!(v["semaphore_vars"]["task_details"]["id"], 7);
        // An empty template Environment: the task's string is not merged, and fails.
        assert_eq!(extra_vars(r#"{"ip":"x"}"#, "", "", 1, "a", "").unwrap_err(), "unexpected end of JSON input");
        let v = extra_vars("", "", "", 1, "a", "m").unwrap();
        assert_eq!(v["semaphore_vars"]["task_details"]["message"], "m");
        assert!(extra_vars("{nope", "{}", "", 1, "a", "").unwrap_err().starts_with("invalid character"));
        assert!(extra_vars("[1]", "{}", "", 1, "a", "").unwrap_err().contains("cannot unmarshal array"));
    }

    fn task(outcome: TaskOutcome) -> Task {
        let s = Duration::from_secs;
        Task {
            id: 1,
            project_id: 1,
            input: TaskInput::default(),
            user_id: 1,
            created_iso: now_iso(),
            created_at: Instant::now(),
            created: Stamp::now(),
            outcome,
            phases: Phases { waiting: s(1), starting: s(2), running: s(10), stopping: s(1) },
            setup_error: None,
            extra_vars: None,
            lines: vec!["PLAY [all]".into(), "PLAY RECAP".into()],
            template_name: "t".into(),
            template_playbook: "p.yml".into(),
            stop: None,
            confirmed: None,
        }
    }

    #[test]
    fn a_task_awaiting_confirmation_waits_until_confirmed_then_runs_and_succeeds() {
        let s = Duration::from_secs;
        let mut t = task(TaskOutcome::AwaitConfirmation);
        let at = t.created_at + s(20);
        assert_eq!(t.status(at).0, "waiting_confirmation");
        assert_eq!(t.status(at + s(3600)).0, "waiting_confirmation", "it waits for an operator, not a clock");
        assert!(t.confirm(at));
        assert_eq!(t.status(at + s(1)).0, "running");
        assert_eq!(t.status(at + s(10)).0, "success");
        assert!(!t.confirm(at + s(11)), "only a waiting task is confirmed");
    }

    #[test]
    fn a_task_moves_through_its_statuses_and_a_stop_ends_it() {
        let s = Duration::from_secs;
        let t = task(TaskOutcome::Success);
        let at = |secs: u64| t.status(t.created_at + s(secs));
        assert_eq!(at(0).0, "waiting");
        assert_eq!(at(1).0, "starting");
        let (status, start, end) = at(3);
        assert_eq!((status, start, end), ("running", Some(t.created_at + s(3)), None));
        assert_eq!(at(13), ("success", Some(t.created_at + s(3)), Some(t.created_at + s(13))));
        assert_eq!(task(TaskOutcome::Fail).status(t.created_at + s(20)).0, "error");
        assert_eq!(t.output(t.created_at).len(), 1, "only the queue line before it starts");
        assert_eq!(t.output(t.created_at + s(13)).len(), 5);
        let mut stopped = task(TaskOutcome::Success);
        stopped.stop = Some((stopped.created_at + s(5), false));
        let at = |secs: u64| stopped.status(stopped.created_at + s(secs)).0;
        assert_eq!((at(4), at(5), at(6)), ("running", "stopping", "stopped"));
        stopped.stop = Some((stopped.created_at + s(5), true));
        assert_eq!(stopped.status(stopped.created_at + s(5)).0, "stopped");
        // v2.10.32 lets a stop turn a finished task `stopped`.
        stopped.stop = Some((stopped.created_at + s(30), false));
        assert_eq!(stopped.status(stopped.created_at + s(30)).0, "stopped");
    }
}
