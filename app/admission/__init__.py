"""Admission: tenant quotas and rate limits that hold across replicas, priorities, and the wait queue."""
