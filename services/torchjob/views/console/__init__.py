"""What the console's pages show, pure: the job list's rows and a job page's summary (rows), the
resource tab's series (series), the creation form as data (job_form, kubeflow_form,
command_line; what the page shows of each job kind, kind_forms) and a clone's manifest
(job_clone). No I/O (the contract "Views do no I/O"); the
console's handlers do every Kubernetes call, as the signed-in user."""
