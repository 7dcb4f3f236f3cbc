# One image for both Cloud Run services; FUNCTION_TARGET / FUNCTION_SOURCE (set per service by
# the Pulumi program) choose the function. Build and push: see docs/deploy.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# A fixed, unprivileged user: nothing in the container runs as root.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin app

# Dependencies first (cached while only the code changes). constraints.txt pins every
# transitive version (`pip freeze` of a clean install, see docs/deploy.md), so a rebuild
# installs exactly what was tested; pyproject.toml keeps the compatible ranges.
COPY constraints.txt pyproject.toml README.md ./
COPY services ./services
RUN pip install --constraint constraints.txt .
# The code stays owned by root: the app user can read it, not change it.

USER app

ENV PORT=8080 \
    FUNCTION_TARGET=worker \
    FUNCTION_SOURCE=services/worker/main.py
EXPOSE 8080

# Shell form so the variables expand at start. First the settings check of the target
# (services/<target>/main.py, the FUNCTION_SOURCE): a bad JOBS_* value exits 2 naming every
# bad key, before anything listens, so the revision fails its startup probe. Then exec, so
# the server gets SIGTERM: functions-framework's app and gunicorn server with Cloud Run's header
# limits and Google's error model on gunicorn's own refusals (services/jobs/server.py). Its
# THREADS, CLOUD_RUN_TIMEOUT_SECONDS and THREADED_TIMEOUT_ENABLED (false: keep-alive,
# docs/deploy.md "Request timeout") come from the service's environment (infra/env.py).
CMD python -m services.${FUNCTION_TARGET}.main \
    && exec python -m services.jobs.server --target=${FUNCTION_TARGET} --source=${FUNCTION_SOURCE} --port=${PORT}
