//! Every step of every registered workflow has its row in the workflow's page under
//! docs/workflows/, read from the registry itself: a new step or a new workflow fails here
//! until it is documented.

use crate::test_support::{FakeAnswer, TestWorld};

/// The page that documents each kind: one page may hold a family of workflows.
fn page(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "credentials.verify" => include_str!("../../../docs/workflows/credentials-verify.md"),
        "cluster.create" => include_str!("../../../docs/workflows/cluster-create.md"),
        "cluster.delete" => include_str!("../../../docs/workflows/cluster-delete.md"),
        "job.run" => include_str!("../../../docs/workflows/job-run.md"),
        "service.deploy" | "service.terminate" => include_str!("../../../docs/workflows/service-deploy.md"),
        "service.upgrade" => include_str!("../../../docs/workflows/service-upgrade.md"),
        "api.deploy" | "api.remove" | "api.rotate_ca" => include_str!("../../../docs/workflows/api-deploy.md"),
        _ => return None,
    })
}

#[tokio::test]
async fn every_registered_step_has_its_row_in_its_workflows_page() {
    let world = TestWorld::new(FakeAnswer::Accept).await;
    let registry = crate::registry(&world.deps);
    let definitions = registry.definitions();
    assert_eq!(definitions.len(), 10, "{definitions:?}");
    let mut missing = Vec::new();
    for (kind, version) in definitions {
        let Some(page) = page(kind) else {
            missing.push(format!("{kind} (v{version}) has no page in docs/workflows/: add one, and its line here"));
            continue;
        };
        let steps = registry.step_names(kind, version).unwrap_or_default();
        assert!(!steps.is_empty(), "{kind} has no steps");
        for step in steps {
            if !page.contains(&format!("| `{step}` |")) {
                missing.push(format!("{kind} (v{version}): no row `| `{step}` |` in its page"));
            }
        }
    }
    assert!(missing.is_empty(), "undocumented:\n{}", missing.join("\n"));
}
