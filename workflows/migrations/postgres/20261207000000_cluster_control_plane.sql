-- Where a cluster's control plane runs when it is not with its capacity: a hosted API places
-- control planes with its hosting credential (`api serve --credentials`), in the API's region and
-- machine type. All NULL: the control plane runs with the capacity, on the cluster's credential.
ALTER TABLE clusters ADD COLUMN control_plane_credential TEXT;
ALTER TABLE clusters ADD COLUMN control_plane_provider TEXT;
ALTER TABLE clusters ADD COLUMN control_plane_region TEXT;
ALTER TABLE clusters ADD COLUMN control_plane_zone TEXT;
ALTER TABLE clusters ADD COLUMN control_plane_vm_type TEXT;
