//! The Anycloud domain. Empty until the cluster issue lands; see docs/engine.md for the engine.
