//! A host other than prefixkv-server builds a `Server` over a store with `Server::new` and runs
//! commands with `execute`, no sockets involved: replies come from the table's handlers, the
//! durability mode is the store's, and what only the host knows (its parameters, saving) goes
//! through its `Host`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prefixkv_commands::commands::{execute, AsyncOp, Client, Flow};
use prefixkv_commands::host::Host;
use prefixkv_commands::keyspace::{self, Keyspace};
use prefixkv_commands::settings::{Durability, Settings};
use prefixkv_commands::state::Server;
use prefixkv_store::{DurableStore, Options};

/// A host with one parameter of its own that counts background saves.
#[derive(Default)]
struct TestHost {
    background_saves: AtomicUsize,
}

impl Host for TestHost {
    fn save(&self) -> Result<(), String> {
        Err("no disk here".into())
    }
    fn start_background_save(&self) -> bool {
        self.background_saves.fetch_add(1, Ordering::SeqCst);
        true
    }
    fn last_save_unix(&self) -> u64 {
        1_700_000_000
    }
    fn shutdown(&self, _save: bool) -> Result<(), String> {
        Ok(())
    }
    fn port(&self) -> u16 {
        7000
    }
    fn threads(&self) -> usize {
        1
    }
    fn info_persistence(&self, text: &mut String) {
        text.push_str("test_host_lines:1\r\n");
    }
    fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![("port", "7000".into())]
    }
}

fn server(dir: &std::path::Path, host: Arc<TestHost>) -> Arc<Server> {
    let mut options = Options::new(dir, Durability::Checkpoint);
    options.engine.index_buckets = 1 << 10;
    options.engine.log_memory_bytes = 8 << 20;
    options.engine.log_page_bytes = 64 << 10;
    let (store, _) = DurableStore::open(options).unwrap();
    let keyspace = Arc::new(Keyspace::counting().with_store(store));
    // Settings say everysec; the store is in checkpoint mode, and the store wins.
    Server::new(Settings::default(), keyspace, host)
}

/// Runs one command and returns its RESP2 reply and what the connection should do next.
fn run(server: &Server, client: &mut Client, args: &[&str]) -> (String, Flow) {
    let args: Vec<Bytes> = args
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    let mut out = BytesMut::new();
    let flow = keyspace::with_session(&server.keyspace.store, |session| {
        execute(server, client, session, &args, &mut out)
    });
    (String::from_utf8_lossy(&out).into_owned(), flow)
}

#[test]
fn a_second_host_builds_a_server_and_runs_commands() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(TestHost::default());
    let server = server(dir.path(), host.clone());
    assert_eq!(server.settings.read().durability, Durability::Checkpoint);
    let mut client = Client::new(1, true, server.settings.read().durability);

    assert_eq!(run(&server, &mut client, &["SET", "k", "v"]).0, "+OK\r\n");
    assert_eq!(run(&server, &mut client, &["GET", "k"]).0, "$1\r\nv\r\n");
    assert_eq!(
        run(&server, &mut client, &["RPUSH", "l", "a", "b"]).0,
        ":2\r\n"
    );
    assert_eq!(
        run(&server, &mut client, &["LRANGE", "l", "0", "-1"]).0,
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        run(&server, &mut client, &["GET"]).0,
        "-ERR wrong number of arguments for 'get' command\r\n"
    );

    // The host's parameters: shown by CONFIG GET, refused by CONFIG SET.
    assert_eq!(
        run(&server, &mut client, &["CONFIG", "GET", "port"]).0,
        "*2\r\n$4\r\nport\r\n$4\r\n7000\r\n"
    );
    let (reply, _) = run(&server, &mut client, &["CONFIG", "SET", "port", "1"]);
    assert!(reply.contains("can't set immutable config"), "{reply}");
    assert_eq!(
        run(&server, &mut client, &["CONFIG", "GET", "appendfsync"]).0,
        "*2\r\n$11\r\nappendfsync\r\n$10\r\ncheckpoint\r\n"
    );

    // Saving is the host's.
    assert_eq!(
        run(&server, &mut client, &["BGSAVE"]).0,
        "+Background saving started\r\n"
    );
    assert_eq!(host.background_saves.load(Ordering::SeqCst), 1);
    assert_eq!(
        run(&server, &mut client, &["LASTSAVE"]).0,
        ":1700000000\r\n"
    );
    let (reply, flow) = run(&server, &mut client, &["SAVE"]);
    assert_eq!(reply, "");
    assert!(matches!(flow, Flow::Async(AsyncOp::Save)));
    let (info, _) = run(&server, &mut client, &["INFO", "persistence"]);
    assert!(info.contains("durability:checkpoint\r\n"), "{info}");
    assert!(info.contains("test_host_lines:1\r\n"), "{info}");
    let (info, _) = run(&server, &mut client, &["INFO", "server"]);
    assert!(info.contains("tcp_port:7000\r\n"), "{info}");
}
