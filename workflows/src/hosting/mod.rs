//! A hosted API, as `api.deploy`, `api.remove` and `api.rotate_ca` make, keep and remove it: the
//! binary its VM runs ([`binary`]), its checkpoint bucket ([`bucket`]) and that bucket's key when
//! it is on another provider ([`storage_key`]), its identity ([`identity`]) and keys ([`keys`]),
//! the credential it gets from its host ([`credential`]), and its VM's boot script
//! ([`user_data`]).

pub mod binary;
pub mod bucket;
pub mod credential;
pub mod identity;
pub mod keys;
pub mod storage_key;
pub mod user_data;
