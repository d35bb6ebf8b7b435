-- The simulated cloud's private image registries (the account's `private_registries` setting),
-- kept on each VM as it is launched, like its boot time: the simulated kubelet of a cluster
-- refuses to pull an image from one of its control plane's private hosts without a pull secret.
-- A JSON array of hosts; VMs launched before the setting existed have none.
ALTER TABLE sim_vms ADD COLUMN private_registries TEXT NOT NULL DEFAULT '[]';
