//! The fleet of the partition tests, for a person: varnish → nginx → three musicd → a
//! Redis Cluster (three masters, three replicas) and a three-member MongoDB replica set,
//! each in its own network namespace. Bring it up, cut links by name, heal them. Run it
//! through `scripts/fleet.sh` (it builds first), as root.
//!
//! ```text
//! scripts/fleet.sh up            # until Ctrl-C; prints the addresses and the links
//! scripts/fleet.sh cut m1-redis  # from another terminal: packets vanish, nothing resets
//! scripts/fleet.sh heal m1-redis
//! scripts/fleet.sh links
//! scripts/fleet.sh down          # after a crash of `up`: processes, namespaces, routes
//! ```
//! `--index N` (default 1) picks the namespaces `mfN-*` and the subnets 10.213.16N+{1,2,3}.

use std::process::ExitCode;

#[allow(dead_code)]
#[path = "../tests/integration/harness/fleet.rs"]
mod fleet;

use fleet::{Fleet, Programs};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut index = 1u8;
    if let Some(at) = args.iter().position(|a| a == "--index") {
        let Some(n) = args
            .get(at + 1)
            .and_then(|n| n.parse().ok())
            .filter(|n| *n < 15)
        else {
            eprintln!("--index takes a number from 0 to 14");
            return ExitCode::from(2);
        };
        index = n;
        args.drain(at..=at + 1);
    }
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["up"] => up(index).await,
        ["cut", link] => {
            report(fleet::set_link(index, link, false).and_then(|()| fleet::check_cut(index, link)))
        }
        ["heal", link] => report(fleet::set_link(index, link, true)),
        ["links"] => {
            for link in Fleet::links() {
                println!("{link}");
            }
            ExitCode::SUCCESS
        }
        ["down"] => {
            fleet::remove_network(index);
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: fleet [--index N] up | cut LINK | heal LINK | links | down");
            ExitCode::from(2)
        }
    }
}

fn report(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{err}");
            ExitCode::FAILURE
        }
    }
}

async fn up(index: u8) -> ExitCode {
    let dir = std::env::temp_dir().join(format!("musicd-fleet-{index}"));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("{}: {err}", dir.display());
        return ExitCode::FAILURE;
    }
    let mut fleet = Fleet::up(index, &dir, &Programs::beside_this_example()).await;
    let client = match mongodb::Client::with_uri_str(fleet.mongo_uri()).await {
        Ok(client) => client,
        Err(err) => {
            eprintln!("mongodb: {err}");
            return ExitCode::FAILURE;
        }
    };
    let tracks = client
        .database("fleet")
        .collection::<mongodb::bson::Document>("tracks");
    let mut ids = Vec::new();
    for i in 0..20 {
        let path = fleet::write_media(
            &fleet,
            &format!("t{i}.mp3"),
            format!("track {i}\n").as_bytes(),
        );
        let id = mongodb::bson::oid::ObjectId::new();
        let document = mongodb::bson::doc! { "_id": id, "path": path.display().to_string() };
        if let Err(err) = tracks.insert_one(document).await {
            eprintln!("mongodb: {err}");
            return ExitCode::FAILURE;
        }
        ids.push(id);
    }
    println!("fleet {index} is up; files under {}", dir.display());
    println!("  varnish  {}", fleet.varnish_base());
    println!("  nginx    {}", fleet.nginx_base());
    for i in 1..=fleet::MUSICDS {
        println!("  m{i}       {}", fleet.musicd_base(i));
    }
    println!("  mongodb  {}", fleet.mongo_uri());
    println!(
        "try:      curl {}/musicdb/{}/t.mp3",
        fleet.varnish_base(),
        ids[0].to_hex()
    );
    println!("links:    {}", Fleet::links().join(" "));
    println!(
        "cut/heal: scripts/fleet.sh --index {index} cut m1-redis; scripts/fleet.sh --index {index} heal m1-redis"
    );
    println!("Ctrl-C stops the fleet and removes its namespaces.");
    let _ = tokio::signal::ctrl_c().await;
    fleet.down();
    ExitCode::SUCCESS
}
