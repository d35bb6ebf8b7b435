//! What a cluster is made of at its providers: where its VMs are ([`sides`]), what its network
//! lets in and how its nodes reach each other ([`network`]), its sealed secrets ([`secrets`]),
//! and what its VMs run when they boot ([`user_data`]).

pub mod network;
pub mod secrets;
pub mod sides;
pub mod user_data;
