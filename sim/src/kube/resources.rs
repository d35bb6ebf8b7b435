//! The resources a simulated cluster serves: the one table that routing, discovery, the store
//! and the errors read (names, kinds, scope, verbs), so that they always agree.

/// One resource type.
#[derive(Debug)]
pub(crate) struct Resource {
    /// The API group (`""` for core).
    pub(crate) group: &'static str,
    /// Its version.
    pub(crate) version: &'static str,
    /// The plural, as in URLs (`jobs`).
    pub(crate) plural: &'static str,
    /// The singular (`job`).
    pub(crate) singular: &'static str,
    /// The kind (`Job`).
    pub(crate) kind: &'static str,
    /// Whether objects live in a namespace.
    pub(crate) namespaced: bool,
    /// `kubectl`'s short names.
    pub(crate) short_names: &'static [&'static str],
    /// Categories (`all`).
    pub(crate) categories: &'static [&'static str],
}

const READ_WRITE: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];
const READ_ONLY: &[&str] = &["get", "list"];

/// Namespaces.
pub(crate) const NAMESPACES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    namespaced: false,
    short_names: &["ns"],
    categories: &[],
};
/// Nodes (computed from the machines, never stored).
pub(crate) const NODES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "nodes",
    singular: "node",
    kind: "Node",
    namespaced: false,
    short_names: &["no"],
    categories: &[],
};
/// Pods.
pub(crate) const PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    namespaced: true,
    short_names: &["po"],
    categories: &["all"],
};
/// Services (ClusterIP, served by [`super::proxy`]).
pub(crate) const SERVICES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "services",
    singular: "service",
    kind: "Service",
    namespaced: true,
    short_names: &["svc"],
    categories: &["all"],
};
/// Secrets (checked by [`super::secrets`], read by the kubelet).
pub(crate) const SECRETS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "secrets",
    singular: "secret",
    kind: "Secret",
    namespaced: true,
    short_names: &[],
    categories: &[],
};
/// Events (what the controllers, the scheduler and the kubelet did).
pub(crate) const EVENTS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    namespaced: true,
    short_names: &["ev"],
    categories: &[],
};
/// Jobs.
pub(crate) const JOBS: Resource = Resource {
    group: "batch",
    version: "v1",
    plural: "jobs",
    singular: "job",
    kind: "Job",
    namespaced: true,
    short_names: &[],
    categories: &["all"],
};
/// Deployments (run by [`super::deployments`]).
pub(crate) const DEPLOYMENTS: Resource = Resource {
    group: "apps",
    version: "v1",
    plural: "deployments",
    singular: "deployment",
    kind: "Deployment",
    namespaced: true,
    short_names: &["deploy"],
    categories: &["all"],
};

/// ReplicaSets (run by [`super::replicasets`]).
pub(crate) const REPLICASETS: Resource = Resource {
    group: "apps",
    version: "v1",
    plural: "replicasets",
    singular: "replicaset",
    kind: "ReplicaSet",
    namespaced: true,
    short_names: &["rs"],
    categories: &["all"],
};
/// Endpoints (written by [`super::endpoints`]).
pub(crate) const ENDPOINTS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "endpoints",
    singular: "endpoints",
    kind: "Endpoints",
    namespaced: true,
    short_names: &["ep"],
    categories: &[],
};

/// Every resource, in discovery's order.
pub(crate) const ALL: [&Resource; 10] =
    [&NAMESPACES, &NODES, &PODS, &SERVICES, &ENDPOINTS, &SECRETS, &EVENTS, &JOBS, &DEPLOYMENTS, &REPLICASETS];

/// The API groups besides core, with their one version.
pub(crate) const GROUPS: [(&str, &str); 2] = [("batch", "v1"), ("apps", "v1")];

impl Resource {
    /// The resource at `group`/`version`/`plural`.
    pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
        ALL.into_iter().find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// `v1` or `batch/v1`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_owned() } else { format!("{}/{}", self.group, self.version) }
    }

    /// `pods` or `jobs.batch`, as errors name them.
    pub(crate) fn group_resource(&self) -> String {
        if self.group.is_empty() { self.plural.to_owned() } else { format!("{}.{}", self.plural, self.group) }
    }

    /// The verbs discovery lists.
    pub(crate) fn verbs(&self) -> &'static [&'static str] {
        if self.plural == NODES.plural { READ_ONLY } else { READ_WRITE }
    }
}
