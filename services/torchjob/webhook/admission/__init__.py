"""Admission: the routes the apiserver calls, what a request may cost, and the job a pod claims."""
