"""The service's job fixtures (a model with its records in its stream, a job queue of its own), for the CLI's job tests."""

from tests.service.conftest import model, queue  # noqa: F401
