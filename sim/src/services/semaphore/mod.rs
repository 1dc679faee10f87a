//! A Semaphore UI stand-in: the API cradle uses to run an Ansible template against a
//! new VM and wait for the result.
//!
//! Contract (facts in `docs/STAND-INS.md`, "Semaphore UI"; behaviour of v2.10.32):
//! authenticated calls need `Authorization: Bearer <token>` (the header is
//! lower-cased and `bearer ` stripped, so tokens are lower-case) or the `semaphore`
//! session cookie from `POST /api/auth/login` (204); anything else is 401 with an
//! empty body. `POST /api/user/tokens` makes a token (201). `POST
//! /api/project/{pid}/tasks` answers 201 with the task (`status: waiting`); its
//! `environment` must be a JSON-encoded string (an object is 400, as Go's decoder
//! refuses it). The task then moves `waiting` → `starting` → `running` → `success`
//! or `error` (the template's [`TaskOutcome`]) over the scaled [`TaskTimings`];
//! `GET .../tasks/{tid}`, `.../output`, `.../stop`, `.../tasks/last` behave as
//! [`tasks`] describes. Extra vars are merged as v2.10.32 does (the template's
//! Environment overrides the task's keys; a template without an Environment fails a
//! task sent with one). The admin may do anything; other users
//! ([`Semaphore::add_user`]) see only their projects (404 elsewhere) and need a role
//! with `CanRunProjectTasks` to start, stop or confirm a task (403, empty body).
//! State lives in memory for the life of the handle.

mod api;
mod tasks;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::http::{Listen, Served};
use super::{Secret, ServiceError, Stamp};
use crate::sim::lock;

/// How a template's runs end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOutcome {
    /// `success`.
    Success,
    /// `error` (the playbook failed).
    Fail,
    /// `waiting_confirmation` after the running time (a Terraform template's plan,
    /// v2.10.32 `db_lib/TerraformApp.go:162`) until `POST .../confirm`; then
    /// `running` again and `success`.
    AwaitConfirmation,
}

/// A user's role in a project (v2.10.32 `db/ProjectUser.go`): which permissions it
/// has. Only `CanRunProjectTasks` is checked by the stand-in (starting, stopping and
/// confirming tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectRole {
    /// `owner`: every permission.
    Owner,
    /// `manager`: runs tasks, manages resources.
    Manager,
    /// `task_runner`: runs tasks.
    TaskRunner,
    /// `guest`: reads only.
    Guest,
}

impl ProjectRole {
    /// `CanRunProjectTasks` (`db/ProjectUser.go:22-27`).
    pub fn can_run_tasks(self) -> bool {
        !matches!(self, ProjectRole::Guest)
    }
}

/// A task template (Ansible playbook) of a project.
#[derive(Debug, Clone)]
pub struct TemplateSpec {
    /// Its id.
    pub id: u32,
    /// Its name (`tpl_alias`).
    pub name: String,
    /// Its playbook (`tpl_playbook`).
    pub playbook: String,
    /// The JSON of the template's Environment's extra vars (`Environment.JSON`; an
    /// environment with no vars is `{}`; `""` = no Environment: `environment_id` is
    /// null, and a task sent with an `environment` fails at creation with HTTP 500).
    pub environment: String,
    /// How its runs end.
    pub outcome: TaskOutcome,
    /// The Ansible output its runs print.
    pub output: Vec<String>,
    /// Whether a task's `arguments` are honoured.
    pub allow_override_args_in_task: bool,
}

impl TemplateSpec {
    /// A template that succeeds, with an empty Environment (`{}`).
    pub fn new(id: u32, name: &str, playbook: &str) -> Self {
        TemplateSpec {
            id,
            name: name.into(),
            playbook: playbook.into(),
            environment: "{}".into(),
            outcome: TaskOutcome::Success,
            output: vec![
                "PLAY [all] *********************************************************************".into(),
                "TASK [Gathering Facts] *********************************************************".into(),
                "PLAY RECAP *********************************************************************".into(),
            ],
            allow_override_args_in_task: false,
        }
    }

    /// A template without an Environment (`environment_id` null), which v2.10.32
    /// cannot start with extra vars: `populateDetails` unmarshals the empty
    /// Environment JSON and fails (`services/tasks/TaskRunner.go:305`).
    pub fn without_environment(id: u32, name: &str, playbook: &str) -> Self {
        TemplateSpec { environment: String::new(), ..TemplateSpec::new(id, name, playbook) }
    }
}

/// A project with its templates.
#[derive(Debug, Clone)]
pub struct ProjectSpec {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its templates.
    pub templates: Vec<TemplateSpec>,
}

/// How long a task spends in each status (multiplied by `time_scale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskTimings {
    /// `waiting` (in the queue).
    pub waiting: Duration,
    /// `starting` (repository checkout, inventory).
    pub starting: Duration,
    /// `running` (the playbook).
    pub running: Duration,
    /// `stopping`, after a stop without `force`.
    pub stopping: Duration,
}

impl Default for TaskTimings {
    fn default() -> Self {
        TaskTimings {
            waiting: Duration::from_secs(1),
            starting: Duration::from_secs(2),
            running: Duration::from_secs(10),
            stopping: Duration::from_secs(1),
        }
    }
}

/// How to start a Semaphore stand-in.
#[derive(Debug, Clone)]
pub struct SemaphoreConfig {
    /// Where to listen (default plain HTTP on an ephemeral loopback port; the real
    /// server's default is HTTP on 3000).
    pub listen: Listen,
    /// The admin's login (default `admin`).
    pub login: String,
    /// The admin's e-mail (also accepted as `auth`; default `admin@localhost`).
    pub email: String,
    /// The admin's password; `None` = generated.
    pub password: Option<Secret>,
    /// An API token that exists from the start (lower-case); `None` = generated.
    pub api_token: Option<Secret>,
    /// Projects (default project 1 `cradle` with template 1 `configure-vm`,
    /// `site.yml`, Environment `{}`, and template 2 `configure-vm-no-env`,
    /// `site.yml` without an Environment; both succeeding).
    pub projects: Vec<ProjectSpec>,
    /// Multiplier for the task timings (0 = tasks finish at once).
    pub time_scale: f64,
    /// Base durations of the task statuses.
    pub timings: TaskTimings,
}

impl Default for SemaphoreConfig {
    fn default() -> Self {
        SemaphoreConfig {
            listen: Listen::loopback(),
            login: "admin".into(),
            email: "admin@localhost".into(),
            password: None,
            api_token: None,
            projects: vec![ProjectSpec {
                id: 1,
                name: "cradle".into(),
                templates: vec![
                    TemplateSpec::new(1, "configure-vm", "site.yml"),
                    // As a template made without choosing an Environment: what a
                    // task with extra vars fails on.
                    TemplateSpec::without_environment(2, "configure-vm-no-env", "site.yml"),
                ],
            }],
            time_scale: 1.0,
            timings: TaskTimings::default(),
        }
    }
}

/// A task as the server holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SemaphoreTask {
    /// Its id.
    pub id: u32,
    /// Its project.
    pub project_id: u32,
    /// Its template.
    pub template_id: i64,
    /// Its status now.
    pub status: String,
    /// The `environment` string as sent.
    pub environment: String,
    /// The extra vars Ansible got (a JSON object); `None` when the task failed at
    /// creation (bad environment JSON).
    pub extra_vars: Option<serde_json::Value>,
    /// `limit`.
    pub limit: String,
    /// `message`.
    pub message: String,
    /// `arguments` as sent.
    pub arguments: Option<String>,
    /// When it was created.
    pub created: Stamp,
}

/// A running Semaphore stand-in; dropping it stops the server.
pub struct Semaphore {
    served: Served,
    login: String,
    password: Secret,
    api_token: Secret,
    state: Arc<Mutex<api::State>>,
}

impl std::fmt::Debug for Semaphore {
    /// The URL only: sessions and tokens in the state are secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore").field("url", &self.url()).finish_non_exhaustive()
    }
}

/// Start a Semaphore stand-in.
pub async fn start(config: SemaphoreConfig) -> Result<Semaphore, ServiceError> {
    let bad = |reason: String| ServiceError::Config { service: "Semaphore", reason };
    if !config.time_scale.is_finite() || config.time_scale < 0.0 {
        return Err(bad(format!("time_scale must be a finite number >= 0, got {}", config.time_scale)));
    }
    if config.login.is_empty() || config.login != config.login.to_lowercase() {
        return Err(bad("login must be non-empty and lower-case (Semaphore lower-cases `auth`)".into()));
    }
    let password = config.password.clone().unwrap_or_else(|| Secret::generate(16));
    let api_token = match &config.api_token {
        Some(t) if t.expose().is_empty() || t.expose() != t.expose().to_lowercase() => {
            return Err(bad("api_token must be non-empty and lower-case (the server lower-cases the header)".into()));
        }
        Some(t) => t.clone(),
        None => Secret::generate(32),
    };
    let mut ids = std::collections::BTreeSet::new();
    for p in &config.projects {
        if !ids.insert(p.id) {
            return Err(bad(format!("project id {} is used twice", p.id)));
        }
    }
    let state = Arc::new(Mutex::new(api::State::new(&config, &api_token)));
    let handler = api::Api {
        login: config.login.clone(),
        email: config.email.to_lowercase(),
        password: password.clone(),
        state: state.clone(),
    };
    let served = Served::start(config.listen, Arc::new(handler)).await?;
    Ok(Semaphore { served, login: config.login, password, api_token, state })
}

impl Semaphore {
    /// The server's base URL, e.g. `http://127.0.0.1:PORT` (the API is under `/api/`).
    pub fn url(&self) -> String {
        self.served.url()
    }

    /// The CA of the self-signed certificate (PEM), when serving HTTPS.
    pub fn ca_pem(&self) -> Option<String> {
        self.served.ca_pem()
    }

    /// The admin's login.
    pub fn login(&self) -> &str {
        &self.login
    }

    /// The admin's password (a secret).
    pub fn password(&self) -> &Secret {
        &self.password
    }

    /// The API token that exists from the start (a secret).
    pub fn api_token(&self) -> &Secret {
        &self.api_token
    }

    /// Every task (all projects), oldest first, with its status now.
    pub fn tasks(&self) -> Vec<SemaphoreTask> {
        let now = tokio::time::Instant::now();
        lock(&self.state).tasks.iter().map(|t| t.public(now)).collect()
    }

    /// One task.
    pub fn task(&self, project_id: u32, id: u32) -> Option<SemaphoreTask> {
        self.tasks().into_iter().find(|t| t.project_id == project_id && t.id == id)
    }

    /// A user who is not a Semaphore admin, with `roles` (project id, role) and an
    /// API token (returned, lower-case). In a project without a role the user gets
    /// 404; a role without `CanRunProjectTasks` gets 403 on starting, stopping or
    /// confirming a task (v2.10.32 `api/projects/project.go`).
    pub fn add_user(&self, login: &str, roles: &[(u32, ProjectRole)]) -> Secret {
        lock(&self.state).add_user(login, roles)
    }

    /// Make a template's later runs end with `outcome`; false if there is no such
    /// template.
    pub fn set_template_outcome(&self, project_id: u32, template_id: u32, outcome: TaskOutcome) -> bool {
        lock(&self.state).set_outcome(project_id, template_id, outcome)
    }

    /// Write the credentials into `dir` (0600 files `semaphore.login`,
    /// `semaphore.password`, `semaphore.token`); returns their paths.
    pub fn write_credentials(&self, dir: &Path) -> Result<Vec<PathBuf>, ServiceError> {
        super::write_secret_files(
            dir,
            &[
                ("semaphore.login", self.login.as_str()),
                ("semaphore.password", self.password.expose()),
                ("semaphore.token", self.api_token.expose()),
            ],
        )
    }
}
