// Command riverbench is the River baseline of `python -m bench` (workload "batch"):
// on its own database of the bench's PostgreSQL it creates River's tables with
// rivermigrate, inserts N no-op jobs with InsertMany in batches from P concurrent
// producers, then starts a River client and works them all (the drain). It prints
// one JSON object on stdout, and progress lines ({"phase": ...}) before it, so the
// caller can meter each phase's CPU.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// NoopArgs is a job that does nothing: the queue's own cost is what is measured.
type NoopArgs struct {
	N int `json:"n"`
}

func (NoopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

func (w *noopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

type result struct {
	River          string    `json:"river"`
	Jobs           int       `json:"jobs"`
	Batch          int       `json:"batch"`
	Producers      int       `json:"producers"`
	Workers        int       `json:"workers"`
	Inserted       int64     `json:"inserted"`
	InsertSeconds  float64   `json:"insert_seconds"`
	BatchLatencyMs []float64 `json:"batch_latencies_ms"`
	Worked         int64     `json:"worked"`
	WorkSeconds    float64   `json:"work_seconds"`
	CapHit         bool      `json:"cap_hit"`
}

func phase(name string) {
	line, _ := json.Marshal(map[string]string{"phase": name})
	fmt.Println(string(line))
}

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL DSN of a database River may own")
	jobs := flag.Int("jobs", 10000, "jobs to insert, then work")
	batch := flag.Int("batch", 500, "jobs per InsertMany call")
	producers := flag.Int("producers", 4, "concurrent InsertMany callers")
	workers := flag.Int("workers", 1000, "River MaxWorkers of the default queue")
	capSeconds := flag.Float64("cap", 300, "longest wait for the drain, seconds")
	flag.Parse()
	if err := run(*dsn, *jobs, *batch, *producers, *workers, *capSeconds); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run(dsn string, jobs, batch, producers, workers int, capSeconds float64) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	workersReg := river.NewWorkers()
	river.AddWorker(workersReg, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:       workersReg,
		FetchCooldown: 5 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	out := result{River: riverVersion(), Jobs: jobs, Batch: batch, Producers: producers, Workers: workers}

	// Insert: producers take batches off a shared counter until N jobs are in.
	phase("insert")
	var next, inserted atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	started := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := next.Add(int64(batch)) - int64(batch)
				if first >= int64(jobs) {
					return
				}
				size := min(int64(batch), int64(jobs)-first)
				params := make([]river.InsertManyParams, size)
				for i := range params {
					params[i] = river.InsertManyParams{Args: NoopArgs{N: int(first) + i}}
				}
				t0 := time.Now()
				if _, err := client.InsertMany(ctx, params); err != nil {
					errs <- err
					return
				}
				ms := float64(time.Since(t0).Microseconds()) / 1000
				mu.Lock()
				out.BatchLatencyMs = append(out.BatchLatencyMs, ms)
				mu.Unlock()
				inserted.Add(size)
			}
		}()
	}
	wg.Wait()
	out.InsertSeconds = time.Since(started).Seconds()
	out.Inserted = inserted.Load()
	select {
	case err := <-errs:
		return fmt.Errorf("InsertMany: %w", err)
	default:
	}

	// Drain: start the client on the backlog and count completions.
	phase("work")
	// A channel as large as the backlog: River drops events a full channel cannot take.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: jobs + 1,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()
	started = time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	deadline := time.After(time.Duration(capSeconds * float64(time.Second)))
	last := started
	for out.Worked < out.Inserted && !out.CapHit {
		select {
		case ev := <-events:
			if ev != nil && ev.Kind == river.EventKindJobCompleted {
				out.Worked++
				last = time.Now()
			}
		case <-deadline:
			out.CapHit = true
		}
	}
	out.WorkSeconds = last.Sub(started).Seconds()
	phase("done")
	stopCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	_ = client.Stop(stopCtx)
	line, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
