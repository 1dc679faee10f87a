//! The proxmox client's response decoders and their lenient readers, siblings
//! here as in the host (`answers.rs` names `super::decode`).

#[path = "../../host/src/caps/proxmox/client/decode.rs"]
pub mod decode;

#[path = "../../host/src/caps/proxmox/client/answers.rs"]
pub mod answers;
