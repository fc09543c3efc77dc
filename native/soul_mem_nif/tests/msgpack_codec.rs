//! Unit tests of the data plane's MessagePack checks (`src/msgpack_codec.rs`, its `tests`
//! module). The NIF crate is a cdylib whose test binary cannot link against the BEAM, so the
//! plain module is compiled here on its own.

#[path = "../src/msgpack_codec.rs"]
mod msgpack_codec;
