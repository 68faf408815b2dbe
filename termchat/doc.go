// Package termchat is a chat with a model in the terminal through an
// agent's API, as `ollama run` is: `orrery run` parses its flags and hands
// a Session the model, the prompt or the terminal. It loads the model on
// demand (a spinner meanwhile), streams answers with reasoning dimmed, and
// reads prompts with history, multi-line input and /set, /show, /clear
// and /bye.
package termchat
