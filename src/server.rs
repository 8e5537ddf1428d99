//! SKELETON: server.
