//! What the console shows besides runs, loaded with plain SQL into an API's database: 4
//! credentials, 5 clusters (4 ready, with a control plane and 2–8 worker VMs each, and 1 failed,
//! with none) and 100,000 deployments on the ready ones: 97 % jobs (88 % of them completed, the
//! rest errored, terminated, failed or invalid; the newest 40 deployments still queued,
//! starting, running or deploying), 3 % services (running, terminated or failed, each with 1–4
//! revisions), spread over 90 days. Each cluster's run is the newest `cluster.create` run of its
//! resource key among the loaded runs ([`super::runs`]); each deployment's run is one of the
//! loaded runs that succeeded, at random (the console looks it up the same way whatever its
//! kind). Used by `cli/benches/console.rs` (included with `#[path]`).

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::machine::now_ms;
use super::runs::{Conn, Kind, Res, lit, opt};

/// Deployments per multi-row `INSERT`, and per transaction.
const ROWS_PER_INSERT: usize = 1_000;
const ROWS_PER_TRANSACTION: usize = 10_000;

/// The newest deployments, still under way.
const ACTIVE: usize = 40;

/// A deployment the requests can ask for.
pub struct Named {
    pub id: String,
    pub name: String,
}

/// What was loaded, for the requests to pick from.
pub struct Fleet {
    /// The ready clusters' names (each has VMs).
    pub clusters: Vec<String>,
    pub jobs: Vec<Named>,
    pub services: Vec<Named>,
}

struct ClusterSpec {
    name: &'static str,
    credential: &'static str,
    provider: &'static str,
    region: &'static str,
    zone: Option<&'static str>,
    vm_type: &'static str,
    workers: usize,
    ready: bool,
}

const fn ready(
    name: &'static str,
    credential: &'static str,
    provider: &'static str,
    region: &'static str,
    zone: Option<&'static str>,
    vm_type: &'static str,
    workers: usize,
) -> ClusterSpec {
    ClusterSpec { name, credential, provider, region, zone, vm_type, workers, ready: true }
}

const CLUSTERS: [ClusterSpec; 5] = [
    ready("prod-001", "team-001", "aws", "us-east-1", None, "t3.large", 3),
    ready("prod-002", "team-002", "gcp", "europe-west4", Some("europe-west4-b"), "e2-standard-4", 5),
    ready("prod-003", "team-003", "aws", "eu-west-1", None, "m6i.xlarge", 8),
    ready("prod-004", "team-004", "gcp", "us-central1", Some("us-central1-a"), "e2-standard-2", 2),
    // Its create failed and was undone: no VM.
    ClusterSpec { ready: false, ..ready("prod-005", "team-001", "aws", "us-east-1", None, "t3.large", 3) },
];

/// Credentials, providers and what they show.
const CREDENTIALS: [(&str, &str, &str); 4] = [
    ("team-001", "aws", r#"{"identity":"AKIAIOSFODNN7EXAMPLE","region":"us-east-1"}"#),
    ("team-002", "gcp", r#"{"identity":"anycloud@acme-prod.iam.gserviceaccount.com","project":"acme-prod"}"#),
    ("team-003", "aws", r#"{"identity":"AKIAI44QH8DHBEXAMPLE","region":"eu-west-1"}"#),
    ("team-004", "gcp", r#"{"identity":"anycloud@acme-data.iam.gserviceaccount.com","project":"acme-data"}"#),
];

/// Loads the credentials, clusters with their VMs, and `deployments` deployments.
pub async fn load(conn: &mut Conn, kind: Kind, deployments: usize) -> Res<Fleet> {
    let started = Instant::now();
    let now = now_ms();
    let mut rng = StdRng::seed_from_u64(0x00f1_ee75);
    for (name, provider, public) in CREDENTIALS {
        let verify: Vec<String> = conn.texts(&newest_run(&format!("credential/{name}"), "credentials.verify")).await?;
        // Sealed values begin `v2:`; this one is never opened (no step runs).
        conn.execute(format!(
            "INSERT INTO credentials (name, provider, public, secret, status, status_message, verify_run, created_at, \
             updated_at) VALUES ({}, {}, {}, 'v2:bench-never-opened', 'valid', NULL, {}, {now}, {now})",
            lit(name),
            lit(provider),
            lit(public),
            opt(verify.first().map(String::as_str))
        ))
        .await?;
    }
    let mut ready = Vec::new();
    let mut vms = 0;
    for (index, spec) in CLUSTERS.iter().enumerate() {
        let id = uuid::Builder::from_random_bytes(rng.random()).into_uuid().to_string();
        add_cluster(conn, spec, &id, index, now).await?;
        if spec.ready {
            vms += add_vms(conn, spec, &id, index, now, &mut rng).await?;
            ready.push(id);
        }
    }
    let runs = conn.texts("SELECT id FROM engine_runs WHERE status = 'succeeded' ORDER BY seq").await?;
    if runs.is_empty() {
        return Err("no run succeeded: nothing for the deployments to point at".into());
    }
    let mut generator = Generator::new(deployments, ready, runs);
    let (mut fleet, revisions) = generator.insert_all(conn).await?;
    fleet.clusters = CLUSTERS.iter().filter(|spec| spec.ready).map(|spec| spec.name.to_owned()).collect();
    let inserted = started.elapsed();
    if kind == Kind::Postgres {
        for table in ["credentials", "clusters", "vms", "deployments", "deployment_revisions"] {
            conn.execute(format!("VACUUM ANALYZE {table}")).await?;
        }
    } else {
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)".to_owned()).await?;
    }
    let counted = (conn.count("deployments").await?, conn.count("deployment_revisions").await?);
    if counted != (deployments as i64, revisions as i64) {
        return Err(
            format!("loaded {counted:?} deployments and revisions, expected ({deployments}, {revisions})").into()
        );
    }
    println!(
        "[{}] loaded {} credentials, {} clusters ({} ready, {vms} VMs), {deployments} deployments ({} jobs, {} services \
         with {revisions} revisions) in {:.1} s",
        kind.name(),
        CREDENTIALS.len(),
        CLUSTERS.len(),
        fleet.clusters.len(),
        fleet.jobs.len(),
        fleet.services.len(),
        inserted.as_secs_f64()
    );
    Ok(fleet)
}

/// The newest run of `kind` under `key`.
fn newest_run(key: &str, kind: &str) -> String {
    format!(
        "SELECT id FROM engine_runs WHERE resource_key = {} AND kind = {} ORDER BY seq DESC LIMIT 1",
        lit(key),
        lit(kind)
    )
}

async fn add_cluster(conn: &mut Conn, spec: &ClusterSpec, id: &str, index: usize, now: i64) -> Res<()> {
    let status = if spec.ready { "succeeded" } else { "failed" };
    let sql = format!(
        "SELECT id FROM engine_runs WHERE resource_key = {} AND kind = 'cluster.create' AND status = {} \
         ORDER BY seq DESC LIMIT 1",
        lit(&format!("cluster/{}", spec.name)),
        lit(status)
    );
    let run = conn.texts(&sql).await?;
    let created = now - (40 - index as i64 * 7) * 86_400_000;
    let (phase, reason, endpoint, network) = if spec.ready {
        ("ready", None, Some(format!("https://10.{}.0.10:6443", index + 1)), Some(format!("vpc-0a1b2c3d{index:08x}")))
    } else {
        (
            "failed",
            Some("step `create_vms` failed: the provider refused: quota exceeded; every completed step was undone"),
            None,
            None,
        )
    };
    conn.execute(format!(
        "INSERT INTO clusters (id, name, credential, provider, region, zone, vm_type, min_vms, max_vms, phase, reason, \
         endpoint, network_id, secrets, workflow_id, delete_requested_at, created_at, updated_at) VALUES \
         ({}, {}, {}, {}, {}, {}, {}, {workers}, {workers}, {}, {}, {}, {}, NULL, {}, NULL, {created}, {})",
        lit(id),
        lit(spec.name),
        lit(spec.credential),
        lit(spec.provider),
        lit(spec.region),
        opt(spec.zone),
        lit(spec.vm_type),
        lit(phase),
        opt(reason),
        opt(endpoint.as_deref()),
        opt(network.as_deref()),
        opt(run.first().map(String::as_str)),
        created + 600_000,
        workers = spec.workers,
    ))
    .await
}

/// The cluster's control plane and workers, all running: answers how many.
async fn add_vms(
    conn: &mut Conn,
    spec: &ClusterSpec,
    id: &str,
    index: usize,
    now: i64,
    rng: &mut StdRng,
) -> Res<usize> {
    let mut rows = Vec::new();
    for vm in 0..=spec.workers {
        let (name, role) = match vm {
            0 => (format!("{}-cp", spec.name), "control-plane"),
            n => (format!("{}-w{n}", spec.name), "worker"),
        };
        let provider_id = match spec.provider {
            "aws" => format!("i-0{:016x}", rng.random::<u64>()),
            _ => format!("{}", rng.random_range(1_000_000_000_000_000_000_u64..9_000_000_000_000_000_000)),
        };
        let public = (vm == 0).then(|| format!("34.{}.{}.{}", 90 + index, rng.random::<u8>(), rng.random::<u8>()));
        rows.push(format!(
            "({}, {}, {}, {}, 'running', {}, {}, {})",
            lit(id),
            lit(&provider_id),
            lit(&name),
            lit(role),
            lit(&format!("10.{}.1.{}", index + 1, 10 + vm)),
            opt(public.as_deref()),
            now - rng.random_range(1_000..30_000)
        ));
    }
    conn.execute(format!(
        "INSERT INTO vms (cluster_id, provider_id, name, role, state, private_ip, public_ip, updated_at) VALUES {}",
        rows.join(", ")
    ))
    .await?;
    Ok(rows.len())
}

// ---------------------------------------------------------------------------------------------
// Deployments

const JOBS: [(&str, &str, &str); 4] = [
    ("etl-nightly", "ghcr.io/acme/etl:2026.11.3", r#"["python","-m","etl.nightly","--since","yesterday"]"#),
    ("backup-db", "postgres:17", r#"["sh","-c","pg_dump \"$DATABASE_URL\" | gzip > /backup/db.sql.gz"]"#),
    ("train", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", r#"["python","train.py","--epochs","20"]"#),
    ("report", "python:3.12", r#"["python","report.py","--week","last"]"#),
];
const SERVICES: [(&str, &str, &str); 3] = [
    ("api", "ghcr.io/acme/api:1.42.0", r#"["./server","--listen","0.0.0.0:8080"]"#),
    ("web", "ghcr.io/acme/web:3.7.2", r#"["node","dist/server.js"]"#),
    ("search", "ghcr.io/acme/search:0.9.14", r#"["./search","serve"]"#),
];
const ENV: [&str; 3] = [
    r#"[{"name":"LOG_LEVEL","value":"info"}]"#,
    r#"[{"name":"LOG_LEVEL","value":"debug"},{"name":"DATA_BUCKET","value":"s3://acme-data/raw"}]"#,
    r#"[{"name":"RUST_LOG","value":"info"},{"name":"REGION","value":"eu"},{"name":"WORKERS","value":"8"}]"#,
];
const SECRETS: [&str; 3] =
    ["[]", r#"[{"name":"db-password","version":3}]"#, r#"[{"name":"ghcr","version":1,"registry":"ghcr.io"}]"#];

struct Generator {
    rng: StdRng,
    start_ms: i64,
    spacing_ms: i64,
    total: usize,
    clusters: Vec<String>,
    runs: Vec<String>,
}

/// The rows of a batch, as `VALUES` tuples.
#[derive(Default)]
struct Rows {
    deployments: Vec<String>,
    revisions: Vec<String>,
}

/// How a deployment stands, for its row.
struct Outcome {
    status: &'static str,
    exit_code: Option<i64>,
    reason: Option<&'static str>,
    started: Option<i64>,
    ended: Option<i64>,
}

impl Generator {
    fn new(total: usize, clusters: Vec<String>, runs: Vec<String>) -> Self {
        // 90 days ending five minutes ago.
        let span = 90 * 24 * 3600 * 1000_i64;
        let start_ms = now_ms() - 300_000 - span;
        let spacing_ms = (span / total.max(1) as i64).max(2);
        Self { rng: StdRng::seed_from_u64(0x00de_9107), start_ms, spacing_ms, total, clusters, runs }
    }

    /// Inserts every deployment and its revisions: what was loaded, and how many revisions.
    async fn insert_all(&mut self, conn: &mut Conn) -> Res<(Fleet, usize)> {
        let total = self.total;
        let mut fleet = Fleet { clusters: Vec::new(), jobs: Vec::new(), services: Vec::new() };
        let mut revisions = 0;
        let mut from = 0;
        while from < total {
            conn.execute("BEGIN".to_owned()).await?;
            let end = (from + ROWS_PER_TRANSACTION).min(total);
            while from < end {
                let to = (from + ROWS_PER_INSERT).min(end);
                let mut rows = Rows::default();
                for index in from..to {
                    self.deployment(index, &mut rows, &mut fleet);
                }
                conn.execute(format!(
                    "INSERT INTO deployments (id, name, kind, cluster_id, status, created_at, image, command, env, \
                     cpus, memory, secrets, attempt, namespace, exit_code, reason, workflow_id, started_at, ended_at, \
                     updated_at, port, replicas, revision, cluster_ip) VALUES {}",
                    rows.deployments.join(",\n")
                ))
                .await?;
                if !rows.revisions.is_empty() {
                    revisions += rows.revisions.len();
                    conn.execute(format!(
                        "INSERT INTO deployment_revisions (deployment_id, number, image, command, env, cpus, memory, \
                         secrets, replicas, progress_deadline_s, result, reason, workflow_id, created_at, ended_at) \
                         VALUES {}",
                        rows.revisions.join(",\n")
                    ))
                    .await?;
                }
                from = to;
            }
            conn.execute("COMMIT".to_owned()).await?;
        }
        Ok((fleet, revisions))
    }

    /// Deployment `index` (and a service's revisions).
    fn deployment(&mut self, index: usize, rows: &mut Rows, fleet: &mut Fleet) {
        let id = uuid::Builder::from_random_bytes(self.rng.random()).into_uuid().to_string();
        let service = self.rng.random_bool(0.03);
        let cluster = self.clusters[self.rng.random_range(0..self.clusters.len())].clone();
        let created = self.start_ms + index as i64 * self.spacing_ms + self.rng.random_range(0..self.spacing_ms / 2);
        let active = index + ACTIVE >= self.total;
        let run = self.runs[self.rng.random_range(0..self.runs.len())].clone();
        let (prefix, image, command) =
            if service { SERVICES[self.rng.random_range(0..3)] } else { JOBS[self.rng.random_range(0..4)] };
        let name = format!("{prefix}-{index:06}");
        let env = ENV[self.rng.random_range(0..3)];
        let secrets = SECRETS[self.rng.random_range(0..3)];
        let (cpus, memory) = [("500m", "512Mi"), ("2", "4Gi"), ("4", "16Gi")][self.rng.random_range(0..3)];
        let (outcome, service_columns) = if service {
            self.service(&id, created, active, &run, (image, command, env, secrets), rows)
        } else {
            (self.job(created, active), "NULL, NULL, NULL, NULL".to_owned())
        };
        let attempt = if !service && self.rng.random_bool(0.05) { 2 } else { 1 };
        let updated = outcome.ended.or(outcome.started).unwrap_or(created);
        rows.deployments.push(format!(
            "({}, {}, {}, {}, {}, {created}, {}, {}, {}, {}, {}, {}, {attempt}, 'anycloud', {}, {}, {}, {}, {}, \
             {updated}, {service_columns})",
            lit(&id),
            lit(&name),
            lit(if service { "service" } else { "job" }),
            lit(&cluster),
            lit(outcome.status),
            lit(image),
            lit(command),
            lit(env),
            lit(cpus),
            lit(memory),
            lit(secrets),
            outcome.exit_code.map_or("NULL".to_owned(), |code| code.to_string()),
            opt(outcome.reason),
            lit(&run),
            outcome.started.map_or("NULL".to_owned(), |at| at.to_string()),
            outcome.ended.map_or("NULL".to_owned(), |at| at.to_string()),
        ));
        let list = if service { &mut fleet.services } else { &mut fleet.jobs };
        list.push(Named { id, name });
    }

    /// A job: the newest still under way, the others ended (most completed).
    fn job(&mut self, created: i64, active: bool) -> Outcome {
        let started = created + self.rng.random_range(3_000..20_000);
        let ended = started + self.rng.random_range(10_000..7_200_000);
        let roll = self.rng.random::<f64>();
        let outcome = |status, exit_code, reason, started, ended| Outcome { status, exit_code, reason, started, ended };
        match (active, roll) {
            (true, roll) if roll < 0.6 => outcome("running", None, None, Some(started), None),
            (true, roll) if roll < 0.8 => {
                outcome("starting", None, Some("waiting for a Pod: ContainerCreating"), None, None)
            }
            (true, _) => outcome("queued", None, None, None, None),
            (false, roll) if roll < 0.88 => {
                outcome("completed", Some(0), Some("Completed"), Some(started), Some(ended))
            }
            (false, roll) if roll < 0.91 => outcome("errored", Some(1), Some("Error"), Some(started), Some(ended)),
            (false, roll) if roll < 0.94 => {
                outcome("errored", Some(137), Some("OOMKilled"), Some(started), Some(ended))
            }
            (false, roll) if roll < 0.98 => {
                outcome("terminated", None, Some("terminated by a person"), Some(started), Some(ended))
            }
            (false, roll) if roll < 0.995 => {
                let reason = "pulling the image failed: manifest unknown; every completed step was undone";
                outcome("failed", None, Some(reason), None, Some(started))
            }
            (false, _) => {
                let reason = "the cluster refused its objects: spec.template.spec.containers[0].resources.limits.memory: \
                              Invalid value";
                outcome("invalid", None, Some(reason), None, Some(started))
            }
        }
    }

    /// A service and its revisions: its outcome and its `port, replicas, revision, cluster_ip`.
    fn service(
        &mut self,
        id: &str,
        created: i64,
        active: bool,
        run: &str,
        spec: (&str, &str, &str, &str),
        rows: &mut Rows,
    ) -> (Outcome, String) {
        let (image, command, env, secrets) = spec;
        let count = self.rng.random_range(1..=4_i64);
        let roll = self.rng.random::<f64>();
        let status = match (active, roll) {
            (true, _) => "deploying",
            (false, roll) if roll < 0.35 => "running",
            (false, roll) if roll < 0.95 => "terminated",
            (false, _) => "failed",
        };
        let count = if active { 1 } else { count };
        let replicas = self.rng.random_range(2..=4_i64);
        let started = created + self.rng.random_range(20_000..90_000);
        let ended = (status != "running" && status != "deploying")
            .then(|| started + self.rng.random_range(3_600_000..2_592_000_000));
        for number in 1..=count {
            let last = number == count;
            let result = match (last, status) {
                (false, _) if self.rng.random_bool(0.1) => "rolled-back",
                (false, _) => "superseded",
                (true, "failed") => "failed",
                (true, other) => other,
            };
            let reason = (result == "rolled-back" || result == "failed")
                .then_some("revision did not become available within its progress deadline (600 s)");
            let at = created + (number - 1) * 86_400_000;
            rows.revisions.push(format!(
                "({}, {number}, {}, {}, {}, '500m', '512Mi', {}, {replicas}, 600, {}, {}, {}, {at}, {})",
                lit(id),
                lit(image),
                lit(command),
                lit(env),
                lit(secrets),
                lit(result),
                opt(reason),
                lit(run),
                if last { ended.map_or("NULL".to_owned(), |at| at.to_string()) } else { (at + 86_400_000).to_string() },
            ));
        }
        let revision = if status == "failed" && count == 1 || status == "deploying" {
            "NULL".to_owned()
        } else {
            count.to_string()
        };
        let ip = format!("'10.43.{}.{}'", self.rng.random::<u8>(), self.rng.random::<u8>());
        let reason =
            (status == "failed").then_some("revision did not become available within its progress deadline (600 s)");
        let outcome = Outcome { status, exit_code: None, reason, started: Some(started), ended };
        (outcome, format!("8080, {replicas}, {revision}, {ip}"))
    }
}
