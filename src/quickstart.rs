//! SKELETON: quickstart.
