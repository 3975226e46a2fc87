FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY toolq ./toolq
COPY examples ./examples
RUN pip install --no-cache-dir . && useradd --create-home toolq
USER toolq
ENV TOOLQ_APP=examples.demo_app:registry
CMD ["toolq", "worker"]
