//! Fills Redis or MongoDB with synthetic data for the benchmarks in `bench/`.
//!
//! ```text
//! cargo run --release --example seed -- redis URL PREFIX COUNT
//! cargo run --release --example seed -- mongo URI DATABASE COLLECTION COUNT FILE...
//! ```
//! Redis keys are `{PREFIX}{n as 24 hex digits}`; MongoDB documents `{_id, path}` with the
//! paths taken round-robin from the FILE arguments.

use anyhow::{Context, bail};
use mongodb::bson::oid::ObjectId;
use mongodb::bson::{Document, doc};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("redis") if args.len() == 4 => {
            let count: u64 = args[3].parse().context("COUNT")?;
            let client = redis::Client::open(args[1].as_str())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let mut n = 0;
            while n < count {
                let mut pipe = redis::pipe();
                for i in n..(n + 10_000).min(count) {
                    pipe.cmd("SET")
                        .arg(format!("{}{i:024x}", args[2]))
                        .arg("/srv/music/seed.mp3")
                        .ignore();
                }
                pipe.query_async::<()>(&mut conn).await?;
                n += 10_000;
            }
            Ok(())
        }
        Some("mongo") if args.len() >= 6 => {
            let count: usize = args[4].parse().context("COUNT")?;
            let files = &args[5..];
            let client = mongodb::Client::with_uri_str(&args[1]).await?;
            let collection = client.database(&args[2]).collection::<Document>(&args[3]);
            let mut n = 0;
            while n < count {
                let batch: Vec<Document> = (n..(n + 10_000).min(count))
                    .map(|i| doc! { "_id": ObjectId::new(), "path": &files[i % files.len()] })
                    .collect();
                collection.insert_many(batch).await?;
                n += 10_000;
            }
            Ok(())
        }
        _ => {
            bail!("usage: seed redis URL PREFIX COUNT | seed mongo URI DB COLLECTION COUNT FILE...")
        }
    }
}
