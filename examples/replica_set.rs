//! Makes a local mongod a single-node replica set (`rs0`), so change streams work: the
//! quickstart's MongoDB, started with `--replSet rs0`. Safe to run again.
//!
//! ```text
//! cargo run --release --example replica_set -- 127.0.0.1:23017
//! ```
//! Exit 0 once the node is primary; 3 when mongod runs without `--replSet` (restart it
//! with the flag); 1 on any other error.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use mongodb::bson::doc;

/// `NoReplicationEnabled`: mongod was started without `--replSet`.
const NO_REPLICATION: i32 = 76;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(host) = std::env::args().nth(1) else {
        eprintln!("usage: replica_set HOST:PORT");
        return ExitCode::from(1);
    };
    match make_primary(&host).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if code(&err) == Some(NO_REPLICATION) => {
            eprintln!("{host}: mongod runs without --replSet: {err}");
            ExitCode::from(3)
        }
        Err(err) => {
            eprintln!("{host}: {err}");
            ExitCode::from(1)
        }
    }
}

fn code(err: &mongodb::error::Error) -> Option<i32> {
    match &*err.kind {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

async fn make_primary(host: &str) -> mongodb::error::Result<()> {
    let uri = format!("mongodb://{host}/?directConnection=true&serverSelectionTimeoutMS=10000");
    let admin = mongodb::Client::with_uri_str(&uri).await?.database("admin");
    let status = admin.run_command(doc! { "replSetGetStatus": 1 }).await;
    match status {
        Ok(_) => {}
        // NotYetInitialized: a fresh --replSet node.
        Err(err) if code(&err) == Some(94) => {
            let config = doc! { "_id": "rs0", "members": [ { "_id": 0, "host": host } ] };
            admin
                .run_command(doc! { "replSetInitiate": config })
                .await?;
            println!("{host}: replica set rs0 initiated");
        }
        Err(err) => return Err(err),
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let hello = admin.run_command(doc! { "hello": 1 }).await?;
        if hello.get_bool("isWritablePrimary").unwrap_or(false) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(mongodb::error::Error::custom("no primary after 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
