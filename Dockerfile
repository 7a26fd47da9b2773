# basalt serve in a container: build on Debian 12 with the project's own setup, then copy the CLI
# and the shared libraries it needs into a slim Debian 12 runtime image (docs/serving.md).
#   docker build -t basalt-serve .
#   docker run -p 8000:8000 -p 8001:8001 -v $PWD/repo:/models basalt-serve
FROM debian:12 AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends make sudo ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN bash scripts/setup.sh && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C /build basalt

FROM debian:12-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libsimdjson14 libssl3 libjpeg62-turbo libpng16-16 libtiff6 libwebp7 libopenjp2-7 \
      ca-certificates && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 basalt
COPY --from=build /build/basalt /usr/local/bin/basalt
USER 10001
EXPOSE 8000 8001
# Inside a container the server must listen beyond loopback: --host 0.0.0.0 is the explicit choice.
ENTRYPOINT ["/usr/local/bin/basalt", "serve", "--host", "0.0.0.0", "--http-port", "8000", "--grpc-port", "8001"]
CMD ["--model-repository", "/models"]
