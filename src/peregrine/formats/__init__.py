"""Saved-model formats Peregrine parses itself, because the library that wrote them cannot load
them without a runtime Peregrine must not need (a Spark ML PipelineModel directory needs a JVM).
Each module reads one format into plain, typed, frozen data: ``peregrine.sources`` detects the
format and calls the reader, and the frontend registered for the data's type converts it. This
part sits below both (layer 1), so neither imports the other."""
