"""Background workers: each is ``run_once()`` returning a small result, plus a thin
loop that sleeps on a wake-up signal (never a busy poll) and swallows only
cancellation."""
