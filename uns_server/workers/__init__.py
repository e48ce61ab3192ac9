"""Background workers: each is a round, ``run_once()`` returning a small result that
says whether to run again at once and when its next work is due, and all of them run
in one shared loop (``loop.run_loop``) that sleeps on a wake-up signal or the poll
(never a busy poll), stops between rounds, and reports the rounds of required workers
to ``supervision``."""
