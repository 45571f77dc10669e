#pragma once
// The chat template of every model dqt trains (it learns from plain text and has no template of
// its own): each message as "<|role|>\n" + content + "\n", then "<|assistant|>\n" opens the
// answer, whose turn ends where "\n<|" begins the next. serve/api.cpp renders it for
// /v1/chat/completions; export writes the same template in Jinja (the language of
// tokenizer.chat_template in GGUF files) so that other engines render prompts alike.
namespace dqt {

inline constexpr const char* kChatTurnEnd = "\n<|";

inline constexpr const char* kChatTemplateJinja =
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

}  // namespace dqt
