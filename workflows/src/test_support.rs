//! For the workflows' own unit tests: a database in a temporary directory, a sealer, and a fake
//! cloud behind the `sim` provider whose answers a test chooses.

use std::sync::Arc;

use anycloud_engine::{Engine, EngineConfig, Registry, Store};
use async_trait::async_trait;

use crate::cloud::Verdict;
use crate::cloud::{Address, Cloud, CloudError, LaunchSpec, Network, Placement, Vm};
use crate::db::Db;
use crate::providers::sim_settings::SimSettings;
use crate::providers::{Clouds, SimulatedCloud};
use crate::seams::TestSeams;
use crate::secrets::SecretBox;
use crate::workflows::deps::Deps;

/// How the fake cloud answers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FakeAnswer {
    /// `verify` accepts the keys.
    Accept,
    /// `verify` refuses them.
    Reject,
    /// The account cannot even be opened.
    CannotOpen,
}

/// A database, a sealer and the fake cloud.
pub(crate) struct TestWorld {
    pub(crate) deps: Deps,
    store: Store,
    _dir: tempfile::TempDir,
}

impl TestWorld {
    pub(crate) async fn new(answer: FakeAnswer) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::sqlite(&dir.path().join("test.db")).await.expect("a store");
        let db = Db::open(&store).await.expect("the domain's tables");
        let sealer = SecretBox::load_or_create(dir.path()).expect("a sealer");
        let clouds = Clouds::new(Some(Arc::new(FakeCloud(answer))));
        Self {
            deps: Deps {
                db,
                sealer,
                clouds,
                seams: TestSeams::default(),
                api_address: None,
                kube_clients: Default::default(),
                binaries: dir.path().join("binaries"),
            },
            store,
            _dir: dir,
        }
    }

    /// The store the world's tables live in.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) async fn engine(&self, registry: Registry) -> Engine {
        let config = EngineConfig { poll_interval: std::time::Duration::from_millis(20), ..EngineConfig::default() };
        Engine::start(self.store.clone(), registry, config).await.expect("an engine")
    }
}

#[derive(Debug, Clone, Copy)]
struct FakeCloud(FakeAnswer);

impl SimulatedCloud for FakeCloud {
    fn account(&self, _identity: &str, _settings: SimSettings) -> Result<Box<dyn Cloud>, CloudError> {
        match self.0 {
            FakeAnswer::CannotOpen => Err(CloudError::Terminal("fake cloud: malformed key".into())),
            _ => Ok(Box::new(*self)),
        }
    }

    fn kube_endpoint(&self, control_plane: &crate::cloud::Vm) -> crate::kubernetes::KubeEndpoint {
        crate::kubernetes::KubeEndpoint::k3s(control_plane)
    }
}

fn unsupported() -> CloudError {
    CloudError::Terminal("the fake cloud only verifies keys".into())
}

#[async_trait]
impl Cloud for FakeCloud {
    async fn verify(&self) -> Result<Verdict, CloudError> {
        Ok(match self.0 {
            FakeAnswer::Reject => Verdict::Rejected { message: "fake cloud: keys refused".into() },
            _ => Verdict::Accepted { detail: "fake cloud: accepted".into() },
        })
    }

    async fn placement(&self, _: &str, _: &str, _: &str) -> Result<Placement, CloudError> {
        Err(unsupported())
    }

    async fn ensure_network(&self, _: &Placement) -> Result<Network, CloudError> {
        Err(unsupported())
    }

    async fn open_network(&self, _: &Placement, _: &crate::cluster::network::Openings) -> Result<(), CloudError> {
        Err(unsupported())
    }

    async fn delete_network(&self, _: &Placement) -> Result<(), CloudError> {
        Err(unsupported())
    }

    async fn network_exists(&self, _: &Placement) -> Result<bool, CloudError> {
        Err(unsupported())
    }

    async fn launch(&self, _: &LaunchSpec<'_>) -> Result<Vm, CloudError> {
        Err(unsupported())
    }

    async fn list_vms(&self, _: &Placement) -> Result<Vec<Vm>, CloudError> {
        Err(unsupported())
    }

    async fn terminate(&self, _: &Placement, _: &[String]) -> Result<(), CloudError> {
        Err(unsupported())
    }

    async fn ensure_address(&self, _: &Placement, _: &str) -> Result<Address, CloudError> {
        Err(unsupported())
    }

    async fn release_addresses(&self, _: &Placement) -> Result<(), CloudError> {
        Err(unsupported())
    }

    async fn list_addresses(&self, _: &Placement) -> Result<Vec<Address>, CloudError> {
        Err(unsupported())
    }
}
