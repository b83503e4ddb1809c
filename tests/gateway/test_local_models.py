"""The in-process `local` models produce real, parseable, deterministic output."""
import io
import math
import struct
import wave
import zlib

import pytest

from gateway import local_media, local_models
from gateway.conversation_request import conversation_from_chat
from utils_app import event_loop


def chat_reply(messages: list[dict]) -> str:
    """The model's reply to chat's messages, read as the local adapter reads them."""
    return local_models.chat_reply(conversation_from_chat(messages))


# ---------------------------------------------------------------- helpers

def parse_png(data: bytes) -> dict:
    """Walks the chunks, checking every CRC; returns the header fields and the inflated pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks = 8, []
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind = data[position + 4:position + 8]
        body = data[position + 8:position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length:position + 12 + length])
        assert crc == zlib.crc32(kind + body), f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        position += 12 + length
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    width, height, depth, colour_type, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    return {"width": width, "height": height, "depth": depth, "colour_type": colour_type,
            "interlace": interlace, "pixels": pixels}


def read_wav(data: bytes):
    with wave.open(io.BytesIO(data), "rb") as wav:
        return wav.getframerate(), wav.getnchannels(), wav.getsampwidth(), wav.getnframes(), wav.readframes(wav.getnframes())


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


# ---------------------------------------------------------------- chat

def test_chat_reply_is_deterministic_and_quotes_the_last_user_message():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    first = chat_reply(messages)
    assert first == chat_reply([dict(m) for m in messages])
    assert "What is the capital of France?" in first
    assert "6 words" in first


def test_chat_reply_differs_for_different_prompts():
    one = chat_reply([{"role": "user", "content": "one"}])
    two = chat_reply([{"role": "user", "content": "two"}])
    assert one != two


def test_chat_reply_reads_content_parts_and_skips_null_content():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Describe"},
                                     {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                                     {"type": "text", "text": "this picture"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                               "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    reply = chat_reply(messages)
    assert '"Describe this picture"' in reply


def test_chat_reply_without_user_text_says_so():
    reply = chat_reply([{"role": "system", "content": "You are terse."}])
    assert "no user text" in reply
    assert chat_reply([]) == chat_reply([])


def test_chat_reply_quotes_at_most_a_bounded_excerpt_of_long_prompts():
    reply = chat_reply([{"role": "user", "content": "word " * 5000}])
    assert "5000 words" in reply
    assert len(reply) < 600


@pytest.mark.parametrize("text", ["", "one", "  leading and trailing  ", "tabs\tand\nnew lines\n\n", "x" * 100])
def test_chat_pieces_join_back_to_the_text(text):
    pieces = list(local_models.chat_pieces(text))
    assert "".join(pieces) == text
    assert all(pieces)


def test_chat_pieces_are_word_sized():
    assert list(local_models.chat_pieces("Hello big world")) == ["Hello ", "big ", "world"]


# ---------------------------------------------------------------- images

@pytest.mark.parametrize("width,height", [(64, 64), (1024, 1024), (300, 77), (1, 1)])
def test_render_png_is_a_valid_png_of_the_asked_size(width, height):
    png = parse_png(local_media.render_png(width, height, "a red fox", seed=3))
    assert (png["width"], png["height"]) == (width, height)
    assert (png["depth"], png["colour_type"], png["interlace"]) == (8, 2, 0)
    row = 1 + width * 3
    assert len(png["pixels"]) == height * row
    assert all(png["pixels"][y * row] == 0 for y in range(height))  # filter type 0 on every row


def test_render_png_handles_the_largest_size():
    png = parse_png(local_media.render_png(4096, 4096, "big", seed=0))
    assert (png["width"], png["height"]) == (4096, 4096)
    assert len(png["pixels"]) == 4096 * (1 + 4096 * 3)


def test_render_png_is_deterministic_and_depends_on_prompt_and_seed():
    base = local_media.render_png(128, 96, "a red fox", seed=1)
    assert base == local_media.render_png(128, 96, "a red fox", seed=1)
    assert base != local_media.render_png(128, 96, "a blue whale", seed=1)
    assert base != local_media.render_png(128, 96, "a red fox", seed=2)


def test_render_png_draws_a_picture_not_a_flat_colour():
    png = parse_png(local_media.render_png(200, 200, "stripes", seed=0))
    pixels = png["pixels"]
    row = 1 + 200 * 3
    top_row, bottom_row = pixels[1:row], pixels[199 * row + 1:200 * row]
    assert len(set(top_row)) > 10
    assert sum(bottom_row) < sum(top_row)  # darker towards the bottom


@pytest.mark.parametrize("width,height", [(0, 10), (10, 0), (4097, 10), (-1, 5)])
def test_render_png_refuses_impossible_sizes(width, height):
    with pytest.raises(ValueError):
        local_media.render_png(width, height, "x")


# ---------------------------------------------------------------- speech

def test_synthesize_wav_is_a_16_bit_mono_wav_at_the_asked_rate():
    rate, channels, width, frames, _ = read_wav(local_media.synthesize_wav("Hello world", voice="alloy"))
    assert (rate, channels, width) == (24000, 1, 2)
    assert frames > 0
    rate, *_ = read_wav(local_media.synthesize_wav("Hello", voice="alloy", sample_rate=16000))
    assert rate == 16000


def test_speech_duration_scales_with_text_length_and_speed():
    def seconds(text, speed):
        rate, _, _, frames, _ = read_wav(local_media.synthesize_wav(text, voice="nova", speed=speed))
        return frames / rate

    normal = seconds("The quick brown fox", 1.0)
    assert seconds("The quick brown fox", 2.0) == pytest.approx(normal / 2, rel=0.01)
    assert seconds("The quick brown fox", 0.5) == pytest.approx(normal * 2, rel=0.01)
    assert seconds("The quick brown fox" * 2, 1.0) == pytest.approx(normal * 2, rel=0.01)


def test_synthesize_pcm_holds_the_same_samples_as_the_wav():
    text = "Same samples"
    pcm = local_media.synthesize_pcm(text, voice="echo", speed=1.5)
    *_, frames = read_wav(local_media.synthesize_wav(text, voice="echo", speed=1.5))
    assert pcm == frames
    assert len(pcm) % 2 == 0


def test_speech_is_audible_deterministic_and_voice_dependent():
    pcm = local_media.synthesize_pcm("abc", voice="alloy")
    samples = struct.unpack(f"<{len(pcm) // 2}h", pcm)
    assert max(samples) > 5000 and min(samples) < -5000
    assert pcm == local_media.synthesize_pcm("abc", voice="alloy")
    assert pcm != local_media.synthesize_pcm("abc", voice="onyx")
    assert pcm != local_media.synthesize_pcm("abd", voice="alloy")


def test_empty_speech_input_still_gives_a_playable_file():
    rate, _, _, frames, data = read_wav(local_media.synthesize_wav("", voice="alloy"))
    assert frames > 0
    assert set(data) == {0}  # silence


@pytest.mark.parametrize("speed", [0, 0.2, 4.5, -1])
def test_speech_refuses_speeds_out_of_range(speed):
    with pytest.raises(ValueError):
        local_media.synthesize_wav("hi", voice="alloy", speed=speed)


# ---------------------------------------------------------------- embeddings

def test_embedding_has_the_fixed_dimension_and_unit_norm():
    vector = local_media.embed("The cat sat on the mat.")
    assert len(vector) == local_media.EMBEDDING_DIMENSIONS
    assert math.sqrt(sum(v * v for v in vector)) == pytest.approx(1.0)
    small = local_media.embed("The cat sat on the mat.", dimensions=16)
    assert len(small) == 16
    assert math.sqrt(sum(v * v for v in small)) == pytest.approx(1.0)


def test_embedding_is_deterministic():
    assert local_media.embed("repeatable text") == local_media.embed("repeatable text")


def test_similar_texts_are_closer_than_unrelated_ones():
    anchor = local_media.embed("The cat sat on the warm mat")
    similar = local_media.embed("A cat was sitting on the mat")
    unrelated = local_media.embed("Quarterly revenue grew by twelve percent in Europe")
    assert cosine(anchor, similar) > cosine(anchor, unrelated) + 0.2


def test_embedding_of_text_without_content_is_the_zero_vector():
    assert local_media.embed("") == [0.0] * local_media.EMBEDDING_DIMENSIONS
    assert local_media.embed(" \n\t") == [0.0] * local_media.EMBEDDING_DIMENSIONS


@pytest.mark.parametrize("dimensions", [0, -3, 5000])
def test_embedding_refuses_impossible_dimensions(dimensions):
    with pytest.raises(ValueError):
        local_media.embed("text", dimensions=dimensions)


# ---------------------------------------------------------------- off the event loop

# (utils_app.event_loop's own tests say how the work is handed off; tests/utils_app/test_event_loop.py)

def test_under_gevent_the_models_answer_exactly_as_in_place(as_under_gevent):
    big_text = "word " * 20_000
    results = (local_media.render_png(1024, 512, "a fox", seed=2), local_media.embed(big_text, 64),
               local_media.synthesize_wav("Hello there", voice="alloy"),
               chat_reply([{"role": "user", "content": big_text}]))
    assert as_under_gevent._pool is not None  # the big ones went to the threads

    as_under_gevent._pool = None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_loop.monkey, "is_module_patched", lambda name: False)
        in_place = (local_media.render_png(1024, 512, "a fox", seed=2), local_media.embed(big_text, 64),
                    local_media.synthesize_wav("Hello there", voice="alloy"),
                    chat_reply([{"role": "user", "content": big_text}]))
    assert results == in_place
    assert as_under_gevent._pool is None


def test_under_gevent_bad_arguments_are_refused_before_any_hand_off(as_under_gevent):
    with pytest.raises(ValueError):
        local_media.render_png(0, 10, "x")
    with pytest.raises(ValueError):
        local_media.synthesize_pcm("Hi", voice="alloy", speed=9)
    with pytest.raises(ValueError):
        local_media.embed("Hi", 0)
    assert as_under_gevent._pool is None
