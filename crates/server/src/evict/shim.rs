//! TEMPORARY stand-in for the store API of branch h-api (access words, sampling, live bytes),
//! so this branch builds before that branch lands; removed by the merge.
#![allow(missing_docs, dead_code)]

use prefixkv_engine::EngineError;
use prefixkv_store::{DurableStore, StoreSession, Txn};

pub struct Sampled {
    pub key: Vec<u8>,
    pub access: u32,
}

pub trait SessionApi {
    fn read_touch(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError>;
    fn access_of(&mut self, key: &[u8]) -> Result<Option<u32>, EngineError>;
    fn sample(
        &mut self,
        start: u64,
        max_keys: usize,
        out: &mut Vec<Sampled>,
    ) -> Result<u64, EngineError>;
}

impl SessionApi for StoreSession {
    fn read_touch(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
        _touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.read(key, out)
    }
    fn access_of(&mut self, key: &[u8]) -> Result<Option<u32>, EngineError> {
        let mut out = Vec::new();
        Ok(self.read(key, &mut out)?.then_some(0))
    }
    fn sample(
        &mut self,
        start: u64,
        max_keys: usize,
        out: &mut Vec<Sampled>,
    ) -> Result<u64, EngineError> {
        let mut cursor = start;
        loop {
            cursor = self.scan(cursor, 64, |key, _| {
                if out.len() < max_keys {
                    out.push(Sampled {
                        key: key.to_vec(),
                        access: 0,
                    })
                }
            })?;
            if cursor == 0 || out.len() >= max_keys {
                return Ok(cursor);
            }
        }
    }
}

pub trait TxnApi {
    fn get_touch(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
        touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError>;
}

impl TxnApi for Txn<'_> {
    fn get_touch(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
        _touch: impl FnOnce(u32) -> u32,
    ) -> Result<bool, EngineError> {
        self.get(key, out)
    }
}

pub trait StoreApi {
    fn set_access_stamp(&self, stamp: u32);
    fn live_bytes(&self) -> u64;
}

impl StoreApi for DurableStore {
    fn set_access_stamp(&self, _stamp: u32) {}
    fn live_bytes(&self) -> u64 {
        self.used_memory_bytes()
    }
}
