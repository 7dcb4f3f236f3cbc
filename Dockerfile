# One image for both Cloud Run services; FUNCTION_TARGET / FUNCTION_SOURCE (set per service by
# the Pulumi program) choose the function. Build and push: see docs/deploy.md; built and run
# locally by `make image-test` (docs/image.md).
#
# The base is pinned by digest, so a rebuild starts from the bytes that were tested. Refresh it
# on purpose (then run `make image-test` and commit):
#   docker buildx imagetools inspect python:3.11-slim --format '{{json .Manifest.Digest}}'
#   (or: crane digest python:3.11-slim)
FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed, unprivileged user with a home of its own: gunicorn keeps its control socket in
# $HOME/.gunicorn, and nothing else of the app writes to disk.
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --home-dir /home/app --create-home \
       --shell /usr/sbin/nologin app

# The code runs from the installed package (site-packages), built from a copy that is removed
# again. constraints.txt pins every transitive runtime version (regenerated and checked as
# docs/image.md says) and pyproject.toml pins the build backend (setuptools), so a rebuild
# installs exactly what was tested; pyproject.toml keeps the dependencies' compatible ranges.
WORKDIR /app
COPY constraints.txt pyproject.toml README.md /tmp/build/
COPY services /tmp/build/services
RUN pip install --constraint /tmp/build/constraints.txt /tmp/build \
    && rm -rf /tmp/build \
    && ln -s "$(python -c 'import os, services; print(os.path.dirname(services.__file__))')" services
# /app/services is that installed package (a link), so FUNCTION_SOURCE=services/<target>/main.py
# and `python -m services.<target>.main` load the same files as every import does. The package
# stays owned by root: the app user can read it, not change it.

USER app

ENV HOME=/home/app \
    PORT=8080 \
    FUNCTION_TARGET=worker \
    FUNCTION_SOURCE=services/worker/main.py
EXPOSE 8080

# Shell form so the variables expand at start. First the settings check of the target
# (services/<target>/main.py, the FUNCTION_SOURCE): a bad JOBS_* value exits 2 naming every
# bad key, before anything listens, so the revision fails its startup probe. Then exec, so
# the server gets SIGTERM: functions-framework's app and gunicorn server with Cloud Run's header
# limits and Google's error model on gunicorn's own refusals (services/edge/server.py). Its
# THREADS, CLOUD_RUN_TIMEOUT_SECONDS and THREADED_TIMEOUT_ENABLED (false: keep-alive,
# docs/deploy.md "Request timeout") come from the service's environment (infra/env.py).
# -P: the working directory (/app, where the `services` link lives) is not put first on
# sys.path, so imports resolve to the installed package itself, as functions-framework's own
# console script would (https://docs.python.org/3/using/cmdline.html#cmdoption-P).
CMD python -P -m services.${FUNCTION_TARGET}.main \
    && exec python -P -m services.edge.server --target=${FUNCTION_TARGET} --source=${FUNCTION_SOURCE} --port=${PORT}
