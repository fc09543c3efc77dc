//! Unit tests of the allocator settings made when the NIF loads (`src/allocator.rs`, its
//! `tests` module), compiled here on their own like `msgpack_codec.rs`.

#[path = "../src/allocator.rs"]
mod allocator;
