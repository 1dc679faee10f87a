//! Semaphore's HTTP API: login, sessions and API tokens, the project's task calls.
//!
//! Contract: see the parent module. Status codes follow v2.10.32's handlers: a body
//! Go cannot decode is 400 with no body; an unknown template is 500 (the task is not
//! created); a task whose extra vars cannot be built is created `error` and answered
//! 500; an unknown task id is 400 (`GetTaskMiddleware`), an unknown project 404, a
//! non-numeric project id 400 `{"error":"Invalid project ID"}`. A user who is not an
//! admin gets 404 for a project without a role in it (`ProjectMiddleware`) and 403,
//! empty, for a non-GET call a role lacks the permission of
//! (`GetMustCanMiddleware(CanRunProjectTasks)` on starting, stopping and confirming
//! tasks).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::tasks::{Phases, Task, decode, extra_vars, now_iso};
use super::{ProjectRole, ProjectSpec, SemaphoreConfig, TaskOutcome, TaskTimings, TemplateSpec};
use crate::services::http::{Handler, Request, Response};
use crate::services::{Secret, Stamp, eq_ct, random_hex};
use crate::sim::lock;

#[derive(Debug, Clone)]
struct Token {
    id: String,
    created: String,
    expired: bool,
    user_id: u32,
}

impl Token {
    fn json(&self) -> Value {
        json!({"id": self.id, "created": self.created, "expired": self.expired, "user_id": self.user_id})
    }
}

/// A user: the admin (id 1) or one made by `add_user`.
#[derive(Debug, Clone)]
pub(super) struct User {
    id: u32,
    login: String,
    admin: bool,
    roles: BTreeMap<u32, ProjectRole>,
}

/// The server's state.
#[derive(Debug)]
pub(super) struct State {
    projects: Vec<ProjectSpec>,
    tokens: Vec<Token>,
    users: Vec<User>,
    /// Session cookie → user id.
    sessions: HashMap<String, u32>,
    pub tasks: Vec<Task>,
    time_scale: f64,
    timings: TaskTimings,
    created: String,
}

impl State {
    pub fn new(cfg: &SemaphoreConfig, token: &Secret) -> State {
        let created = now_iso();
        State {
            projects: cfg.projects.clone(),
            tokens: vec![Token {
                id: token.expose().to_string(),
                created: created.clone(),
                expired: false,
                user_id: 1,
            }],
            users: vec![User { id: 1, login: cfg.login.clone(), admin: true, roles: BTreeMap::new() }],
            sessions: HashMap::new(),
            tasks: Vec::new(),
            time_scale: cfg.time_scale,
            timings: cfg.timings,
            created,
        }
    }

    pub fn add_user(&mut self, login: &str, roles: &[(u32, ProjectRole)]) -> Secret {
        let id = u32::try_from(self.users.len()).unwrap_or(u32::MAX).saturating_add(1);
        self.users.push(User { id, login: login.to_lowercase(), admin: false, roles: roles.iter().copied().collect() });
        let token = new_token(id);
        let secret = Secret::new(&token.id);
        self.tokens.push(token);
        secret
    }

    pub fn set_outcome(&mut self, project_id: u32, template_id: u32, outcome: TaskOutcome) -> bool {
        let tpl = self
            .projects
            .iter_mut()
            .filter(|p| p.id == project_id)
            .flat_map(|p| p.templates.iter_mut())
            .find(|t| t.id == template_id);
        match tpl {
            Some(t) => {
                t.outcome = outcome;
                true
            }
            None => false,
        }
    }

    fn template(&self, project_id: u32, template_id: i64) -> Option<&TemplateSpec> {
        self.projects
            .iter()
            .filter(|p| p.id == project_id)
            .flat_map(|p| p.templates.iter())
            .find(|t| i64::from(t.id) == template_id)
    }

    fn phases(&self) -> Phases {
        let s = |d: std::time::Duration| {
            if self.time_scale <= 0.0 { std::time::Duration::ZERO } else { d.mul_f64(self.time_scale) }
        };
        Phases {
            waiting: s(self.timings.waiting),
            starting: s(self.timings.starting),
            running: s(self.timings.running),
            stopping: s(self.timings.stopping),
        }
    }
}

/// The request handler.
pub(super) struct Api {
    pub login: String,
    pub email: String,
    pub password: Secret,
    pub state: Arc<Mutex<State>>,
}

/// A new API token of `user_id`: 32 random bytes, base64url, lower-cased.
fn new_token(user_id: u32) -> Token {
    use base64::Engine as _;
    let bytes: [u8; 32] = crate::model::ids::random_bytes();
    let id = base64::engine::general_purpose::URL_SAFE.encode(bytes).to_lowercase();
    Token { id, created: now_iso(), expired: false, user_id }
}

fn json_resp(status: u16, body: &Value) -> Response {
    Response::text(status, "application/json", format!("{body}\n"))
}

impl Api {
    /// `authenticationHandler`: the user of a bearer token, else of the session
    /// cookie.
    fn authenticated(&self, req: &Request) -> Option<User> {
        let header = req.header("authorization").unwrap_or_default().to_lowercase();
        let st = lock(&self.state);
        let user_id = if !header.is_empty() && header.contains("bearer") {
            let token = header.replacen("bearer ", "", 1);
            st.tokens.iter().find(|t| !t.expired && eq_ct(t.id.as_bytes(), token.as_bytes())).map(|t| t.user_id)
        } else {
            req.cookie("semaphore").and_then(|c| st.sessions.get(c).copied())
        }?;
        st.users.iter().find(|u| u.id == user_id).cloned()
    }

    fn login(&self, req: &Request) -> Response {
        let body = serde_json::Deserializer::from_slice(&req.body).into_iter::<Value>().next();
        let Some(Ok(Value::Object(o))) = body else { return Response::empty(400) };
        let field = |k: &str| match o.get(k) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(()),
        };
        let (Ok(auth), Ok(password)) = (field("auth"), field("password")) else { return Response::empty(400) };
        let auth = auth.to_lowercase();
        if !(auth == self.login || auth == self.email) || !self.password.matches(&password) {
            return Response::empty(401);
        }
        let session = random_hex(16);
        lock(&self.state).sessions.insert(session.clone(), 1);
        Response::empty(204).with_header("set-cookie", format!("semaphore={session}; Path=/"))
    }

    fn user_api(&self, req: &Request, user: &User, segs: &[&str]) -> Response {
        let mut st = lock(&self.state);
        match (req.method.as_str(), segs) {
            ("GET", []) => {
                let (name, email) = if user.admin {
                    ("Administrator".to_string(), self.email.clone())
                } else {
                    (user.login.clone(), format!("{}@localhost", user.login))
                };
                json_resp(
                    200,
                    &json!({"id": user.id, "created": st.created, "username": user.login, "name": name,
                        "email": email, "external": false, "alert": false, "admin": user.admin,
                        "can_create_project": user.admin}),
                )
            }
            ("GET", ["tokens"]) => json_resp(
                200,
                &Value::Array(st.tokens.iter().filter(|t| t.user_id == user.id).map(Token::json).collect()),
            ),
            ("POST", ["tokens"]) => {
                let token = new_token(user.id);
                st.tokens.push(token.clone());
                json_resp(201, &token.json())
            }
            ("DELETE", ["tokens", id]) => match st.tokens.iter_mut().find(|t| t.id == *id && t.user_id == user.id) {
                Some(t) => {
                    t.expired = true;
                    Response::empty(204)
                }
                None => Response::empty(404),
            },
            _ => Response::empty(404),
        }
    }

    fn add_task(&self, req: &Request, user: &User, project_id: u32) -> Response {
        let Ok(input) = decode(&req.body) else { return Response::empty(400) };
        let mut st = lock(&self.state);
        let Some(tpl) = st.template(project_id, input.template_id).cloned() else {
            return Response::empty(500);
        };
        let id = u32::try_from(st.tasks.len()).unwrap_or(u32::MAX).saturating_add(1);
        let vars = extra_vars(&input.environment, &tpl.environment, &input.secret, id, &user.login, &input.message);
        let task = Task {
            id,
            project_id,
            input,
            user_id: user.id,
            created_iso: now_iso(),
            created_at: Instant::now(),
            created: Stamp::now(),
            outcome: tpl.outcome,
            phases: st.phases(),
            setup_error: vars.as_ref().err().cloned(),
            extra_vars: vars.ok(),
            lines: tpl.output.clone(),
            template_name: tpl.name.clone(),
            template_playbook: tpl.playbook.clone(),
            stop: None,
            confirmed: None,
        };
        let failed = task.setup_error.is_some();
        let body = task.created_json();
        st.tasks.push(task);
        if failed { Response::empty(500) } else { json_resp(201, &body) }
    }

    fn task_api(&self, req: &Request, project_id: u32, tid: &str, tail: &[&str]) -> Response {
        let now = Instant::now();
        let Ok(tid) = tid.parse::<u32>() else { return Response::empty(400) };
        let mut st = lock(&self.state);
        let Some(task) = st.tasks.iter_mut().find(|t| t.project_id == project_id && t.id == tid) else {
            return Response::empty(400);
        };
        match (req.method.as_str(), tail) {
            ("GET", []) => json_resp(200, &task.json(now, "")),
            ("GET", ["output"]) => {
                let lines: Vec<Value> = task
                    .output(now)
                    .into_iter()
                    .map(|(at, line)| json!({"task_id": task.id, "task": "", "time": task.line_time(at), "output": line}))
                    .collect();
                json_resp(200, &Value::Array(lines))
            }
            ("POST", ["stop"]) => {
                let body = serde_json::Deserializer::from_slice(&req.body).into_iter::<Value>().next();
                let force = match body {
                    Some(Ok(Value::Object(o))) => match o.get("force") {
                        None | Some(Value::Null) => false,
                        Some(Value::Bool(b)) => *b,
                        Some(_) => return Response::empty(400),
                    },
                    _ => return Response::empty(400),
                };
                if task.status(now).0 != "stopped" && (task.stop.is_none() || force) {
                    task.stop = Some((now, force));
                }
                Response::empty(204)
            }
            ("POST", ["confirm"]) => {
                // v2.10.32 TaskPool.ConfirmTask finds the running task; the stand-in
                // confirms only one waiting for it and answers 204 either way.
                task.confirm(now);
                Response::empty(204)
            }
            _ => Response::empty(404),
        }
    }

    fn project_api(&self, req: &Request, user: &User, pid: &str, rest: &[&str]) -> Response {
        let Ok(project_id) = pid.parse::<u32>() else {
            return json_resp(400, &json!({"error": "Invalid project ID"}));
        };
        // ProjectMiddleware (api/projects/project.go:13-45): a user who is not an
        // admin and has no role in the project gets GetProjectUser's ErrNotFound: 404.
        let role = user.roles.get(&project_id).copied();
        if !user.admin && role.is_none() {
            return Response::empty(404);
        }
        let templates: Vec<Value> = {
            let st = lock(&self.state);
            let Some(p) = st.projects.iter().find(|p| p.id == project_id) else { return Response::empty(404) };
            p.templates
                .iter()
                .map(|t| {
                    // db/Template.go:66: `environment_id` is null without an Environment.
                    let env_id = if t.environment.is_empty() { Value::Null } else { json!(t.id) };
                    json!({"id": t.id, "project_id": p.id, "name": t.name, "playbook": t.playbook,
                    "type": "", "app": "ansible", "environment_id": env_id,
                    "allow_override_args_in_task": t.allow_override_args_in_task})
                })
                .collect()
        };
        // GetMustCanMiddleware(CanRunProjectTasks) (api/router.go:175-181,
        // api/projects/project.go:48-62): not for GET/HEAD, not for admins; 403, empty.
        let runs_tasks = matches!(rest, ["tasks"] | ["tasks", _, "stop" | "confirm"]);
        if runs_tasks && !user.admin && req.method != "GET" && req.method != "HEAD" {
            let allowed = role.is_some_and(ProjectRole::can_run_tasks);
            if !allowed {
                // A task that does not exist is refused first (GetTaskMiddleware).
                let unknown_task = match rest {
                    ["tasks", tid, _] => tid.parse::<u32>().map_or(true, |tid| {
                        !lock(&self.state).tasks.iter().any(|t| t.project_id == project_id && t.id == tid)
                    }),
                    _ => false,
                };
                return Response::empty(if unknown_task { 400 } else { 403 });
            }
        }
        let now = Instant::now();
        let list = |limit: usize| {
            let st = lock(&self.state);
            let tasks: Vec<Value> = st
                .tasks
                .iter()
                .rev()
                .filter(|t| t.project_id == project_id)
                .take(limit)
                .map(|t| t.json_with_template(now, &self.login))
                .collect();
            json_resp(200, &Value::Array(tasks))
        };
        match (req.method.as_str(), rest) {
            ("POST", ["tasks"]) => self.add_task(req, user, project_id),
            ("GET" | "HEAD", ["tasks"]) => list(1000),
            ("GET" | "HEAD", ["tasks", "last"]) => {
                let limit = req
                    .query_pairs()
                    .into_iter()
                    .find(|(k, _)| k == "limit")
                    .and_then(|(_, v)| v.parse::<usize>().ok())
                    .filter(|l| (1..=200).contains(l))
                    .unwrap_or(200);
                list(limit)
            }
            (_, ["tasks", tid, tail @ ..]) => self.task_api(req, project_id, tid, tail),
            ("GET" | "HEAD", ["templates"]) => json_resp(200, &Value::Array(templates)),
            ("GET" | "HEAD", ["templates", tid]) => {
                match templates.into_iter().find(|t| tid.parse::<u64>().ok() == t["id"].as_u64()) {
                    Some(t) => json_resp(200, &t),
                    None => Response::empty(404),
                }
            }
            _ => Response::empty(404),
        }
    }
}

impl Handler for Api {
    fn handle(&self, req: &Request) -> Response {
        let segs = req.segments();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        let method = req.method.as_str();
        match segs.as_slice() {
            ["api", "ping"] if matches!(method, "GET" | "HEAD") => {
                Response::text(200, "text/plain; charset=utf-8", "pong")
            }
            ["api", "auth", "login"] if method == "GET" => {
                json_resp(200, &json!({"oidc_providers": [], "login_with_password": true}))
            }
            ["api", "auth", "login"] if method == "POST" => self.login(req),
            ["api", "auth", "logout"] => {
                if let Some(c) = req.cookie("semaphore") {
                    lock(&self.state).sessions.remove(c);
                }
                Response::empty(204)
                    .with_header("set-cookie", "semaphore=; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT")
            }
            ["api", rest @ ..] => {
                let Some(user) = self.authenticated(req) else {
                    return Response::empty(401);
                };
                match rest {
                    ["user", tail @ ..] => self.user_api(req, &user, tail),
                    ["project", pid, tail @ ..] => self.project_api(req, &user, pid, tail),
                    _ => Response::empty(404),
                }
            }
            [] => Response::text(
                200,
                "text/html; charset=utf-8",
                "<!DOCTYPE html><html><head><title>Semaphore UI</title></head></html>",
            ),
            _ => Response::empty(404),
        }
    }
}
