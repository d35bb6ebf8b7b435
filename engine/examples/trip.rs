//! Books three trips on a SQLite store and prints how each went: one succeeds, one succeeds
//! after retries, one fails and is undone. `cargo run -p anycloud-engine --example trip [DB]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anycloud_engine::{
    Effect, Engine, EngineConfig, Registry, RetryPolicy, RunDetail, Step, StepCtx, StepError, StepKey, Steps, Store,
    Workflow,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Trip {
    city: String,
    /// The airline refuses this many requests before it answers.
    airline_outages: u32,
    /// No seats at all.
    sold_out: bool,
}

/// Hotel, then flight, then an e-mail. A flight that cannot be had cancels the hotel.
struct BookTrip {
    airline_calls: AtomicU32,
}

/// The steps whose outputs are read, declared once with their types.
const BOOK_HOTEL: StepKey<String> = StepKey::new("book_hotel");
const BOOK_FLIGHT: StepKey<String> = StepKey::new("book_flight");

impl Workflow for BookTrip {
    const KIND: &'static str = "trip.book";
    const VERSION: u32 = 1;
    type Input = Trip;
    type Output = String;

    fn steps() -> Steps<Self> {
        Steps::new()
            .then(Step::action(BOOK_HOTEL, book_hotel).undo(cancel_hotel))
            .then(Step::action(BOOK_FLIGHT, book_flight).retry(RetryPolicy::fixed(Duration::from_millis(200), 5)))
            .then(Step::action("send_itinerary", |ctx: StepCtx<Self>| async move {
                Ok(format!("sent to traveller for {}", ctx.input().city))
            }))
    }

    fn output(ctx: &StepCtx<Self>) -> Result<String, StepError> {
        Ok(format!("{} + {}", ctx.output(BOOK_HOTEL)?, ctx.output(BOOK_FLIGHT)?))
    }
}

async fn book_hotel(ctx: StepCtx<BookTrip>) -> Result<String, StepError> {
    Ok(format!("hotel in {} (booking {})", ctx.input().city, &ctx.idempotency_key().to_string()[..8]))
}

/// The booking when the step completed; when it was cut short, whatever the hotel holds under the
/// step's idempotency key.
async fn cancel_hotel(_ctx: StepCtx<BookTrip>, booking: Effect<String>) -> Result<(), StepError> {
    match booking {
        Effect::Done(booking) => println!("    undo: cancelled {booking}"),
        Effect::Unknown => println!("    undo: cancelled any booking made under the step's key"),
    }
    Ok(())
}

async fn book_flight(ctx: StepCtx<BookTrip>) -> Result<String, StepError> {
    let trip = ctx.input();
    if trip.sold_out {
        return Err(StepError::terminal_msg(format!("every flight to {} is sold out", trip.city)));
    }
    if ctx.attempt() < trip.airline_outages {
        ctx.workflow().airline_calls.fetch_add(1, Ordering::SeqCst);
        let cause = std::io::Error::new(std::io::ErrorKind::TimedOut, "airline API timed out");
        return Err(StepError::retryable(cause).context("booking the flight"));
    }
    Ok(format!("flight to {}", trip.city))
}

fn print(detail: &RunDetail) {
    let run = &detail.run;
    println!("  run {} ended {}", run.id, run.status);
    if let Some(reason) = &run.status_reason {
        println!("    why: {reason}");
    }
    for step in &detail.steps {
        let phase = if step.phase == anycloud_engine::Phase::Undo { "undo " } else { "" };
        let error = step.error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default();
        println!("    {phase}{:<15} {:<9} attempts={}{error}", step.name, step.status, step.attempts);
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "trip-example.db".to_owned());
    let store = Store::connect(&format!("sqlite://{path}")).await?;
    println!("store: sqlite://{path}");
    let workflow = Arc::new(BookTrip { airline_calls: AtomicU32::new(0) });
    let config = EngineConfig { poll_interval: Duration::from_millis(50), ..EngineConfig::named("trip-example") };
    let engine = Engine::start(store, Registry::new().with(workflow), config).await?;

    let trips = [
        ("a trip that just works", Trip { city: "Lisbon".into(), airline_outages: 0, sold_out: false }),
        ("an airline that times out twice", Trip { city: "Oslo".into(), airline_outages: 2, sold_out: false }),
        ("a sold-out flight", Trip { city: "Reykjavik".into(), airline_outages: 0, sold_out: true }),
    ];
    for (what, trip) in trips {
        println!("\n{what}:");
        let id = engine.submit::<BookTrip>(&trip, Some("traveller/ada")).await?;
        engine.wait(id, Duration::from_secs(30)).await?;
        print(&engine.inspect(id).await?);
    }
    engine.shutdown(Duration::from_secs(5)).await;
    Ok(())
}
