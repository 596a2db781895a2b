"""The shared model and its jobs: `SharedLM` (shared_model.py), the one owner of a loaded model's lock,
composed of its parts (scheduler, prompt_tokens, responses, salience_runs, salience_store, caches) and
the job system (jobs, jobs_status, jobs_table, user_jobs, progressive, cancel, time_left)."""
